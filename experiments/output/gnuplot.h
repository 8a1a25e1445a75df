// The sweep's pictures, drawn by gnuplot, and the one place where text becomes gnuplot code.
//
// gnuplot runs what its script says, and a script made from names that came from the command
// line or from a results.csv must not say anything the sweep did not write itself: in a
// double-quoted string gnuplot substitutes `backquoted` commands, and a line break ends a
// command. So every piece of text goes into a script as GpLiteral (single quotes, inside which
// gnuplot expands nothing) or into a data file as GpDataLabel, and the only double-quoted
// strings the sweep writes are its own "\n" and "'". Names never hold control characters anyway
// (specs and cells read back refuse them); these functions do not rely on it. A property test
// (testing/gnuplot_test.cc) has gnuplot read generated hostile text back.
//
//   std::string gp = PanelsPreamble("pareto", models.size(), 2, 820, 440, "'title'");
//   for (...) gp += Panel(model, {"'pareto.dat' index 0 using 1:2 title " + GpLiteral(name)});
//   RETURN_IF_ERROR(DrawPanels(dir, "pareto", data, gp));
//
// A script names its picture through the variable `output_file` (PanelsPreamble), which
// RenderPlot sets to a temporary: the picture replaces the old one only once gnuplot has
// exited 0 and left a whole PNG, and `gnuplot pareto.gp` by hand still writes pareto.png.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// `text` as a gnuplot string expression of single-quoted pieces, ('it' . "'" . 's'), with its
// control characters (a line break would end the command line) and bytes that are not UTF-8
// escaped (core/base/printable.h), which single quotes keep as they are.
std::string GpLiteral(absl::string_view text);

// `text` broken after its ':' separators into lines of at most `width` characters where it
// can be (a model spec is wider than a panel), as GpLiterals joined by "\n".
std::string GpTitle(absl::string_view text, size_t width = 60);

// `text` as a double-quoted label field of a gnuplot data file, whose reader runs no commands:
// control characters and bytes that are not UTF-8 escaped (core/base/printable.h), then double
// quotes and backslashes (which that reader takes as escapes, not always as documented) written as
// '?'.
std::string GpDataLabel(absl::string_view text);

// A picture of panels, one per model. The script's opening: a pngcairo terminal writing to
// `output_file` (<stem>.png unless the caller set it), `panels` panels `columns` across, each
// `width` x `height` pixels, under `title_code` (a gnuplot string the sweep wrote itself).
std::string PanelsPreamble(const std::string& stem, size_t panels, size_t columns, int width,
                           int height, absl::string_view title_code);
// A panel: its title (text, as GpTitle) and the plot of `plots`, gnuplot plot elements.
std::string Panel(absl::string_view title, const std::vector<std::string>& plots);
// Writes <stem>.dat (`data`) and <stem>.gp (`script`, its multiplot then closed) whole, then
// draws <stem>.png (RenderPlot).
absl::Status DrawPanels(const std::string& dir, const std::string& stem, const std::string& data,
                        const std::string& script);

// Runs gnuplot on `script` in `dir`, writing `dir/output` as above. Unavailable when gnuplot is
// not installed; Internal when it failed (its messages then in `dir/script.log`, and the first
// of them in the status); DataLoss when the picture could not be written whole. The old picture
// stays as it was on any failure.
absl::Status RenderPlot(const std::string& dir, const std::string& script,
                        const std::string& output);

// What a program run by RunProgram did.
struct ProgramResult {
  int exit_code = 0;
  std::string stderr_text;  // its first 64 KiB
};

// Runs the program argv[0] (looked up in PATH) with `argv` in the working directory `dir`,
// without a shell: no argument or path is ever interpreted. NotFound if it is not installed,
// Internal if it could not be started or was killed by a signal.
absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& dir);

}  // namespace ckpt

#include "experiments/output/gnuplot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"

extern char** environ;

namespace ckpt {
namespace {

constexpr size_t kStderrBytes = 64 * 1024;

// Whether `path` holds a whole PNG: the signature first and the IEND chunk last.
bool IsWholePng(const std::string& path) {
  absl::StatusOr<std::string> png = ReadRegularFile(path, int64_t{1} << 30);
  static constexpr char kSignature[] = "\x89PNG\r\n\x1a\n";
  static constexpr char kEnd[] = "\0\0\0\0IEND\xae\x42\x60\x82";
  return png.ok() && png->size() >= 20 && png->compare(0, 8, kSignature, 8) == 0 &&
         png->compare(png->size() - 12, 12, kEnd, 12) == 0;
}

}  // namespace

std::string GpLiteral(absl::string_view text) {
  // gnuplot's own escape for a quote inside single quotes, two quotes, fails to parse where
  // two of them meet, so each quote is the sweep's double-quoted "'" joined on.
  const std::vector<std::string> pieces = absl::StrSplit(Printable(text), '\'');
  return absl::StrCat("(",
                      absl::StrJoin(pieces, " . \"'\" . ",
                                    [](std::string* out, const std::string& piece) {
                                      absl::StrAppend(out, "'", piece, "'");
                                    }),
                      ")");
}

std::string GpTitle(absl::string_view text, size_t width) {
  std::vector<std::string> lines(1);
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string part = absl::StrCat(parts[i], i + 1 < parts.size() ? ":" : "");
    if (!lines.back().empty() && lines.back().size() + part.size() > width) lines.emplace_back();
    lines.back() += part;
  }
  return absl::StrCat("(",
                      absl::StrJoin(lines, " . \"\\n\" . ",
                                    [](std::string* out, const std::string& line) {
                                      out->append(GpLiteral(line));
                                    }),
                      ")");
}

std::string GpDataLabel(absl::string_view text) {
  // gnuplot's data reader takes backslash escapes in a double-quoted field, and one that starts
  // with an escaped quote is cut at its first space: no spec the sweep makes holds either.
  std::string label = Printable(text);
  for (char& c : label) {
    if (c == '"' || c == '\\') c = '?';
  }
  return absl::StrCat("\"", label, "\"");
}

std::string PanelsPreamble(const std::string& stem, size_t panels, size_t columns, int width,
                           int height, absl::string_view title_code) {
  columns = std::max<size_t>(1, std::min(columns, panels));
  const size_t rows = std::max<size_t>(1, (panels + columns - 1) / columns);
  return absl::StrCat("if (!exists('output_file')) output_file = ", GpLiteral(stem + ".png"),
                      "\nset terminal pngcairo size ", width * columns, ",", height * rows,
                      " font ',9'\nset output output_file\nset multiplot layout ", rows, ",",
                      columns, " title ", title_code, "\n");
}

std::string Panel(absl::string_view title, const std::vector<std::string>& plots) {
  return absl::StrCat("set title ", GpTitle(title), " noenhanced\nplot ",
                      absl::StrJoin(plots, ", "), "\n");
}

absl::Status DrawPanels(const std::string& dir, const std::string& stem, const std::string& data,
                        const std::string& script) {
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/", stem, ".dat"), data));
  RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(dir, "/", stem, ".gp"), script + "unset multiplot\n"));
  return RenderPlot(dir, stem + ".gp", stem + ".png");
}

absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& dir) {
  if (argv.empty()) return absl::InvalidArgumentError("RunProgram: no program");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int errors[2];  // the program's stderr
  if (pipe2(errors, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // In `dir`, reading and writing nothing but its stderr. glibc's posix_spawnp reports a
  // program that could not start (not found, a chdir refused) as its return value.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, errors[1], STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(errors[1]);
  if (error != 0) {
    close(errors[0]);
    const std::string what =
        absl::StrCat("cannot run ", argv[0], " in ", dir, ": ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(what) : absl::InternalError(what);
  }
  ProgramResult result;
  char chunk[4096];
  while (true) {
    const ssize_t n = read(errors[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (result.stderr_text.size() < kStderrBytes) {
      result.stderr_text.append(
          chunk, std::min(static_cast<size_t>(n), kStderrBytes - result.stderr_text.size()));
    }
  }
  close(errors[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat(argv[0], " was killed by signal ", WTERMSIG(status)));
  }
  result.exit_code = WEXITSTATUS(status);
  return result;
}

absl::Status RenderPlot(const std::string& dir, const std::string& script,
                        const std::string& output) {
  const std::string path = absl::StrCat(dir, "/", output);
  absl::StatusOr<std::string> temporary = MakeTemporaryBeside(path);
  if (!temporary.ok()) return temporary.status();
  // The temporary's name is the sweep's own ("." + output + ".tmp." + letters and digits).
  const std::string name = temporary->substr(temporary->rfind('/') + 1);
  absl::StatusOr<ProgramResult> run =
      RunProgram({"gnuplot", "-e", absl::StrCat("output_file = ", GpLiteral(name)), script}, dir);
  if (!run.ok() || run->exit_code != 0) {
    DiscardFile(*temporary);
    if (!run.ok() && run.status().code() == absl::StatusCode::kNotFound) {
      return absl::UnavailableError(
          absl::StrCat("gnuplot is not installed (apt-get install gnuplot-nox); ", output,
                       " was not drawn (its data and ", script, " were written)"));
    }
    if (!run.ok()) return run.status();
    const std::string log = absl::StrCat(script, ".log");
    const std::string first_line(absl::StripAsciiWhitespace(
        std::vector<absl::string_view>(absl::StrSplit(run->stderr_text, '\n')).front()));
    const absl::Status logged = WriteFileAtomically(absl::StrCat(dir, "/", log),
                                                    Printable(run->stderr_text, LineBreaks::kKeep));
    return absl::InternalError(absl::StrCat("gnuplot failed on ", dir, "/", script, " (exit ",
                                            run->exit_code, ": ", first_line, ")",
                                            logged.ok() ? absl::StrCat("; see ", log) : ""));
  }
  if (!IsWholePng(*temporary)) {
    DiscardFile(*temporary);
    return absl::DataLossError(
        absl::StrCat("cannot write ", path, ": gnuplot left no whole picture (a full disk?)"));
  }
  return CommitFile(*temporary, path);
}

}  // namespace ckpt

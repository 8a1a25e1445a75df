// Text from users, files and libraries as ckptlab prints and writes it: every control character
// (C0, DEL, and C1: U+0080..U+009F, CSI among them) and every byte that is not part of
// well-formed UTF-8 becomes a visible escape, so that nothing a spec, a path, a plan file, a CSV
// cell or a library's message holds can end a line, rewrite a terminal or cut a message short
// (NUL). Every message and output passes through here on its way out. Needs no LibTorch.
//
//   std::fprintf(stderr, "sweep: %s\n", Printable(status.message()).c_str());
//   RETURN_IF_ERROR(WriteFileAtomically(path, Printable(report, LineBreaks::kKeep)));
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace ckpt {

// The index of the first byte of the first control character or ill-formed byte in `text`, or
// -1 when it has none.
int FindUnprintable(absl::string_view text);

// The length in bytes (1 to 4) of the printable character that starts at `text[at]`, or 0 when a
// control character or an ill-formed byte starts there: for a reader that checks as it goes.
int PrintableCharacterLength(absl::string_view text, size_t at);

// The length in bytes (1 to 4) of the character that starts at `text[at]`, printable or not: a
// well-formed UTF-8 sequence whole (a C1 control is two bytes), an ill-formed byte alone; 0 at
// the end. For a reader that cuts text into characters.
int CharacterLength(absl::string_view text, size_t at);

// What Printable does with line breaks and tabs.
enum class LineBreaks {
  kEscape,  // \n, \r and \t, like every other control character: one line
  kKeep,    // '\n' kept (a table, a report), the others escaped
  kBlank,   // \n, \r and \t as spaces (a CSV cell: a message's line breaks)
};

// `text` with each control character or ill-formed byte escaped: \n, \r and \t as such (unless
// `breaks` says otherwise), a C1 character as \u0080..\u009f, anything else as \xNN (NUL is
// \x00, ESC \x1b, DEL \x7f, a lone 0xff \xff). Printable text is returned as it was.
std::string Printable(absl::string_view text, LineBreaks breaks = LineBreaks::kEscape);

// The unprintable thing that starts at `text[at]`, in words, for an error that refuses it: "a NUL
// byte", "a line break", "a control character (byte 0x1b)", "a C1 control character (U+009B)",
// "a byte that is not UTF-8 (0xff)".
std::string DescribeUnprintable(absl::string_view text, int at);

}  // namespace ckpt

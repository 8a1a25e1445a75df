#include "core/base/printable.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace ckpt {
namespace {

// What starts at text[at]: a character of `length` bytes, printable or not.
struct Unit {
  int length = 1;
  bool printable = true;
  bool c1 = false;  // a C1 control character (two bytes: 0xc2 0x80..0x9f)
};

bool Continuation(absl::string_view text, size_t at, unsigned char lo = 0x80,
                  unsigned char hi = 0xbf) {
  if (at >= text.size()) return false;
  const unsigned char c = static_cast<unsigned char>(text[at]);
  return c >= lo && c <= hi;
}

// Well-formed UTF-8 as Unicode defines it (no overlong forms, no surrogates, nothing past
// U+10FFFF); a byte that starts no such sequence is a unit of its own, unprintable.
Unit UnitAt(absl::string_view text, size_t at) {
  const unsigned char c = static_cast<unsigned char>(text[at]);
  if (c < 0x20 || c == 0x7f) return {1, false, false};
  if (c < 0x80) return {1, true, false};
  if (c >= 0xc2 && c <= 0xdf && Continuation(text, at + 1)) {
    const bool c1 = c == 0xc2 && static_cast<unsigned char>(text[at + 1]) <= 0x9f;
    return {2, !c1, c1};
  }
  // The second byte's range, by lead byte, for the three- and four-byte forms.
  unsigned char lo = 0x80, hi = 0xbf;
  int length = 0;
  if (c == 0xe0) {
    lo = 0xa0, length = 3;
  } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
    length = 3;
  } else if (c == 0xed) {
    hi = 0x9f, length = 3;
  } else if (c == 0xf0) {
    lo = 0x90, length = 4;
  } else if (c >= 0xf1 && c <= 0xf3) {
    length = 4;
  } else if (c == 0xf4) {
    hi = 0x8f, length = 4;
  }
  if (length == 0 || !Continuation(text, at + 1, lo, hi)) return {1, false, false};
  for (int k = 2; k < length; ++k) {
    if (!Continuation(text, at + k)) return {1, false, false};
  }
  return {length, true, false};
}

}  // namespace

int PrintableCharacterLength(absl::string_view text, size_t at) {
  if (at >= text.size()) return 0;
  const Unit u = UnitAt(text, at);
  return u.printable ? u.length : 0;
}

int CharacterLength(absl::string_view text, size_t at) {
  return at >= text.size() ? 0 : UnitAt(text, at).length;
}

int FindUnprintable(absl::string_view text) {
  for (size_t at = 0; at < text.size();) {
    const Unit u = UnitAt(text, at);
    if (!u.printable) return static_cast<int>(at);
    at += u.length;
  }
  return -1;
}

std::string Printable(absl::string_view text, LineBreaks breaks) {
  if (FindUnprintable(text) < 0) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t at = 0; at < text.size();) {
    const Unit u = UnitAt(text, at);
    const char c = text[at];
    if (u.printable) {
      out.append(text.data() + at, u.length);
    } else if (u.c1) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(text[at + 1]));
    } else if (c == '\n' && breaks == LineBreaks::kKeep) {
      out.push_back('\n');
    } else if ((c == '\n' || c == '\r' || c == '\t') && breaks == LineBreaks::kBlank) {
      out.push_back(' ');
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c == '\t') {
      out.append("\\t");
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
    }
    at += u.length;
  }
  return out;
}

std::string DescribeUnprintable(absl::string_view text, int at) {
  if (at < 0 || static_cast<size_t>(at) >= text.size()) return "nothing unprintable";
  const Unit u = UnitAt(text, at);
  const char c = text[at];
  if (u.printable) return "nothing unprintable";
  if (c == '\0') return "a NUL byte";
  if (c == '\n') return "a line break";
  const unsigned char byte = static_cast<unsigned char>(c);
  if (u.c1) {
    return absl::StrFormat("a C1 control character (U+%04X)",
                           static_cast<unsigned char>(text[at + 1]));
  }
  if (byte >= 0x80) return absl::StrFormat("a byte that is not UTF-8 (0x%02x)", byte);
  return absl::StrFormat("a control character (byte 0x%02x)", byte);
}

}  // namespace ckpt

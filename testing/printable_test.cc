// core/base/printable: every control character (C0, DEL, C1) and every byte that is not UTF-8 is
// found and escaped; printable text, UTF-8 included, is left alone.
#include "core/base/printable.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

TEST(FindUnprintable, FindsTheFirstControlOrIllFormedByte) {
  EXPECT_EQ(FindUnprintable("heavy_mlp:depth=2"), -1);
  EXPECT_EQ(FindUnprintable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), -1);  // é, €, an emoji
  EXPECT_EQ(FindUnprintable("a\nb"), 1);
  EXPECT_EQ(FindUnprintable(std::string("ab\0", 3)), 2);
  EXPECT_EQ(FindUnprintable("x\x1b[2J"), 1);
  EXPECT_EQ(FindUnprintable("\x7f"), 0);
  EXPECT_EQ(FindUnprintable("ok\xc2\x9b"
                            "31m"),
            2);                                  // CSI as a C1 character, U+009B
  EXPECT_EQ(FindUnprintable("ok\xc2\x85"), 2);   // NEL, U+0085
  EXPECT_EQ(FindUnprintable("ok\xc2\xa0"), -1);  // U+00A0 is printable
  EXPECT_EQ(FindUnprintable("ok\x9b"), 2);       // a lone 8-bit CSI is not UTF-8
  EXPECT_EQ(FindUnprintable("\xff"), 0);
  EXPECT_EQ(FindUnprintable("\xc0\xaf"), 0);          // an overlong '/'
  EXPECT_EQ(FindUnprintable("\xed\xa0\x80"), 0);      // a surrogate
  EXPECT_EQ(FindUnprintable("\xf4\x90\x80\x80"), 0);  // past U+10FFFF
  EXPECT_EQ(FindUnprintable("ab\xe2\x82"), 2);        // cut short
}

TEST(CharacterLength, TakesWholeSequencesAndIllFormedBytesAlone) {
  EXPECT_EQ(CharacterLength("a", 0), 1);
  EXPECT_EQ(CharacterLength("\x1b", 0), 1);
  EXPECT_EQ(CharacterLength("\xc2\x9b", 0), 2);  // a C1 control, unprintable but one character
  EXPECT_EQ(CharacterLength("\xc3\xa9", 0), 2);
  EXPECT_EQ(CharacterLength("\xe2\x82\xac", 0), 3);
  EXPECT_EQ(CharacterLength("\xf0\x9f\x98\x80", 0), 4);
  EXPECT_EQ(CharacterLength("\xe2\x82", 0), 1);  // cut short
  EXPECT_EQ(CharacterLength("\xff", 0), 1);
  EXPECT_EQ(CharacterLength("ab", 2), 0);
}

TEST(Printable, EscapesVisiblyAndKeepsTheRest) {
  EXPECT_EQ(Printable("heavy_mlp:depth=2"), "heavy_mlp:depth=2");
  EXPECT_EQ(Printable("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(Printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(Printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(Printable("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(Printable("\x7f"), "\\x7f");
  EXPECT_EQ(Printable("\xc2\x9b"
                      "2J"),
            "\\u009b2J");
  EXPECT_EQ(Printable("\x9b"
                      "2J\xff"),
            "\\x9b2J\\xff");
  EXPECT_EQ(Printable("one\ntwo\x1b", LineBreaks::kKeep), "one\ntwo\\x1b");
  EXPECT_EQ(Printable("one\r\ntwo\tthree\x1b", LineBreaks::kBlank), "one  two three\\x1b");
}

TEST(DescribeUnprintable, SaysWhatItIs) {
  EXPECT_EQ(DescribeUnprintable(std::string("a\0", 2), 1), "a NUL byte");
  EXPECT_EQ(DescribeUnprintable("a\n", 1), "a line break");
  EXPECT_EQ(DescribeUnprintable("\x1b", 0), "a control character (byte 0x1b)");
  EXPECT_EQ(DescribeUnprintable("\xc2\x9b", 0), "a C1 control character (U+009B)");
  EXPECT_EQ(DescribeUnprintable("\xff", 0), "a byte that is not UTF-8 (0xff)");
}

// Any bytes at all: what Printable makes has nothing left to escape, in every mode, and text with
// nothing to escape comes back as it was.
RC_GTEST_PROP(Printable, LeavesNothingUnprintable, (const std::vector<unsigned char>& bytes)) {
  const std::string text(bytes.begin(), bytes.end());
  RC_ASSERT(FindUnprintable(Printable(text)) == -1);
  RC_ASSERT(FindUnprintable(Printable(text, LineBreaks::kBlank)) == -1);
  const std::string kept = Printable(text, LineBreaks::kKeep);
  for (size_t at = 0; at < kept.size();) {  // only its line breaks are left
    const int bad = FindUnprintable(absl::string_view(kept).substr(at));
    if (bad < 0) break;
    RC_ASSERT(kept[at + bad] == '\n');
    at += bad + 1;
  }
  if (FindUnprintable(text) < 0) RC_ASSERT(Printable(text) == text);
}

}  // namespace
}  // namespace ckpt

// core/base/zip: a member found from the archive's directory, on archives written here as
// PyTorch's writer lays them out (a folder, stored members, padding in the local headers, zip64
// end records, zip64 sizes in an entry's extra field); any bytes, and any archive cut short or
// with bytes changed, give a member inside the archive or an error, never a crash.
#include "core/base/zip.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace ckpt {
namespace {

struct Member {
  std::string name;
  std::string data;
  int method = 0;  // 0 stored, 8 deflated (the data written as it is: nothing here inflates it)
};

struct Layout {
  bool zip64 = false;       // zip64 end records, the classic one's fields saying so
  bool wide_sizes = false;  // each entry's sizes and offset in a zip64 extra field
  int padding = 0;          // bytes of extra field in each local header (PyTorch aligns data)
  std::string comment;      // the archive's comment
};

void Put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i) & 0xFF));
}

std::string Write(const std::vector<Member>& members, const Layout& layout) {
  std::string out, directory;
  for (const Member& m : members) {
    const uint64_t local = out.size();
    Put(out, 0x04034b50, 4);
    Put(out, 20, 2);
    Put(out, 0, 2);
    Put(out, m.method, 2);
    Put(out, 0, 4);  // time, date
    Put(out, 0, 4);  // crc: not read
    Put(out, m.data.size(), 4);
    Put(out, m.data.size(), 4);
    Put(out, m.name.size(), 2);
    Put(out, layout.padding, 2);
    out += m.name + std::string(layout.padding, 'Z') + m.data;
    std::string extra;
    if (layout.wide_sizes) {
      Put(extra, 0x0001, 2);
      Put(extra, 24, 2);
      Put(extra, m.data.size(), 8);
      Put(extra, m.data.size(), 8);
      Put(extra, local, 8);
    }
    const uint64_t wide = layout.wide_sizes ? 0xFFFFFFFF : 0;
    Put(directory, 0x02014b50, 4);
    Put(directory, 20, 2);
    Put(directory, 20, 2);
    Put(directory, 0, 2);
    Put(directory, m.method, 2);
    Put(directory, 0, 4);
    Put(directory, 0, 4);
    Put(directory, wide ? wide : m.data.size(), 4);
    Put(directory, wide ? wide : m.data.size(), 4);
    Put(directory, m.name.size(), 2);
    Put(directory, extra.size(), 2);
    Put(directory, 0, 2);  // comment
    Put(directory, 0, 2);  // disk
    Put(directory, 0, 2);
    Put(directory, 0, 4);
    Put(directory, wide ? wide : local, 4);
    directory += m.name + extra;
  }
  const uint64_t offset = out.size();
  out += directory;
  if (layout.zip64) {
    const uint64_t end64 = out.size();
    Put(out, 0x06064b50, 4);
    Put(out, 44, 8);
    Put(out, 45, 2);
    Put(out, 45, 2);
    Put(out, 0, 4);
    Put(out, 0, 4);
    Put(out, members.size(), 8);
    Put(out, members.size(), 8);
    Put(out, directory.size(), 8);
    Put(out, offset, 8);
    Put(out, 0x07064b50, 4);
    Put(out, 0, 4);
    Put(out, end64, 8);
    Put(out, 1, 4);
  }
  Put(out, 0x06054b50, 4);
  Put(out, 0, 4);
  Put(out, layout.zip64 ? 0xFFFF : members.size(), 2);
  Put(out, layout.zip64 ? 0xFFFF : members.size(), 2);
  Put(out, layout.zip64 ? 0xFFFFFFFF : directory.size(), 4);
  Put(out, layout.zip64 ? 0xFFFFFFFF : offset, 4);
  Put(out, layout.comment.size(), 2);
  return out + layout.comment;
}

Layout AnyLayout() {
  Layout layout;
  layout.zip64 = *rc::gen::arbitrary<bool>();
  layout.wide_sizes = *rc::gen::arbitrary<bool>();
  layout.padding = *rc::gen::inRange(0, 64);
  layout.comment =
      *rc::gen::container<std::string>(*rc::gen::inRange(0, 40), rc::gen::arbitrary<char>());
  return layout;
}

// Whether `part` lies inside `whole`'s bytes.
bool Within(absl::string_view part, absl::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

RC_GTEST_PROP(FindZipMember, FindsEachStoredMemberOfAnyLayoutAndNothingElse, ()) {
  const int count = *rc::gen::inRange(1, 6);
  std::vector<Member> members;
  for (int i = 0; i < count; ++i) {
    members.push_back({absl::StrCat("archive/", i == 0 ? "data.pkl" : absl::StrCat("extra/m", i)),
                       *rc::gen::arbitrary<std::string>()});
  }
  const std::string zip = Write(members, AnyLayout());
  for (int i = 1; i < count; ++i) {
    absl::StatusOr<std::optional<ZipMember>> found = FindZipMember(zip, absl::StrCat("extra/m", i));
    RC_ASSERT(found.ok());
    RC_ASSERT(found->has_value());
    RC_ASSERT((*found)->method == 0);
    RC_ASSERT((*found)->size == members[i].data.size());
    RC_ASSERT(std::string((*found)->stored) == members[i].data);
  }
  // Names compared exactly, in the first member's folder only.
  for (const char* other : {"extra/M1", "Extra/m1", "m1", "extra/m", "archive/extra/m1", ""}) {
    absl::StatusOr<std::optional<ZipMember>> found = FindZipMember(zip, other);
    RC_ASSERT(found.ok());
    RC_ASSERT(!found->has_value());
  }
}

TEST(FindZipMember, TakesTheLastOfTwoAndSaysHowOneIsCompressed) {
  const std::string zip = Write({{"a/data.pkl", "d"},
                                 {"a/extra/w", "first"},
                                 {"b/extra/w", "another folder's"},
                                 {"a/extra/w", "last"},
                                 {"a/extra/z", "xx", 8}},
                                Layout());
  absl::StatusOr<std::optional<ZipMember>> w = FindZipMember(zip, "extra/w");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->has_value());
  EXPECT_EQ((*w)->stored, "last");
  absl::StatusOr<std::optional<ZipMember>> z = FindZipMember(zip, "extra/z");
  ASSERT_TRUE(z.ok()) << z.status();
  ASSERT_TRUE(z->has_value());
  EXPECT_EQ((*z)->method, 8);
  EXPECT_EQ((*z)->size, 2u);
  EXPECT_TRUE((*z)->stored.empty());
}

TEST(FindZipMember, RefusesWhatIsNoArchiveOrNoFolder) {
  for (const std::string& bad : {std::string(), std::string("not a zip\n"), std::string(21, '\0'),
                                 Write({{"data.pkl", "x"}}, Layout()),  // no folder
                                 Write({{"a/data.pkl", "x"}}, Layout()).substr(1)}) {
    absl::StatusOr<std::optional<ZipMember>> found = FindZipMember(bad, "extra/w");
    EXPECT_FALSE(found.ok()) << bad.size();
    if (!found.ok()) {
      EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

RC_GTEST_PROP(FindZipMember, AnyBytesGiveAMemberInsideThemOrAnError, (const std::string& bytes)) {
  absl::StatusOr<std::optional<ZipMember>> found = FindZipMember(bytes, "extra/w");
  if (!found.ok()) {
    RC_ASSERT(found.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  if (found->has_value()) RC_ASSERT(Within((*found)->stored, bytes));
}

RC_GTEST_PROP(FindZipMember, AnArchiveCutOrChangedGivesAMemberInsideItOrAnError, ()) {
  std::string zip = Write({{"archive/data.pkl", *rc::gen::arbitrary<std::string>()},
                           {"archive/extra/w", *rc::gen::arbitrary<std::string>()}},
                          AnyLayout());
  const int changes = *rc::gen::inRange(1, 8);
  for (int i = 0; i < changes; ++i) {
    const size_t at = *rc::gen::inRange<size_t>(0, zip.size());
    zip[at] = *rc::gen::arbitrary<char>();
  }
  if (*rc::gen::arbitrary<bool>()) zip.resize(*rc::gen::inRange<size_t>(0, zip.size() + 1));
  absl::StatusOr<std::optional<ZipMember>> found = FindZipMember(zip, "extra/w");
  if (found.ok() && found->has_value()) RC_ASSERT(Within((*found)->stored, zip));
}

}  // namespace
}  // namespace ckpt

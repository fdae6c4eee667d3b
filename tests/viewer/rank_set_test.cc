#include "common/stacks/rank_set.h"

#include <gtest/gtest.h>

namespace xtimer {
namespace {

TEST(RankSet, FoldsConsecutiveRanksIntoRanges) {
  EXPECT_EQ(FoldRanks(std::vector<int32_t>{0, 1, 2, 3, 5, 7, 8}), "0-3/5/7-8");
  EXPECT_EQ(FoldRanks(std::vector<int32_t>{8, 7, 5, 3, 2, 1, 0, 5}), "0-3/5/7-8");  // any order, duplicates
  EXPECT_EQ(FoldRanks(std::vector<int32_t>{}), "");
  EXPECT_EQ(FoldRanks(std::vector<int32_t>{4}), "4");
  EXPECT_EQ(FoldRanks(std::vector<int32_t>{4, 5}), "4-5");
}

TEST(RankSet, ComplementAndMinus) {
  RankSet s({0, 1, 2, 3, 5, 7, 8});
  EXPECT_EQ(s.Complement(10).Fold(), "4/6/9");
  EXPECT_EQ(RankSet().Complement(3).Fold(), "0-2");
  EXPECT_EQ(RankSet::Range(0, 4).Complement(4).Fold(), "");
  EXPECT_EQ(s.Minus(RankSet({1, 2, 8})).Fold(), "0/3/5/7");
}

TEST(RankSet, FoldsTheComplementWithoutBuildingIt) {
  // The same text as Complement().Fold(), for many sets, worlds and truncations.
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 8) % 1000; };
  for (int round = 0; round < 300; ++round) {
    int32_t world = static_cast<int32_t>(next() % 40);
    std::vector<int32_t> r;
    for (uint32_t i = 0, n = next() % 40; i < n; ++i) r.push_back(static_cast<int32_t>(next() % 45));
    RankSet s(r);
    for (size_t max : {0, 1, 2, 5})
      EXPECT_EQ(s.FoldComplement(world, max), s.Complement(world).Fold(max)) << s.Fold() << " of " << world;
  }
  // A hostile world size costs nothing: the answer is computed from the set alone.
  EXPECT_EQ(RankSet({5}).FoldComplement(2147483647), "0-4/6-2147483646");
  EXPECT_EQ(RankSet({0, 2}).FoldComplement(2147483647, 1), "1/...+2147483644");
}

TEST(RankSet, TruncatesLongListsWhenAsked) {
  RankSet even;
  std::vector<int32_t> r;
  for (int i = 0; i < 20; i += 2) r.push_back(i);
  even = RankSet(r);
  EXPECT_EQ(even.Fold(3), "0/2/4/...+7");
  EXPECT_EQ(even.Fold(), "0/2/4/6/8/10/12/14/16/18");
}

TEST(RankSet, ParsesItsOwnFolding) {
  for (const char* text : {"0-3/5/7-8", "", "0", "2-4096"}) {
    auto s = RankSet::ParseFolded(text);
    ASSERT_TRUE(s.has_value()) << text;
    EXPECT_EQ(s->Fold(), text);
  }
  for (const char* bad : {"3-1", "1/1", "0-3/2", "a", "1-", "-1", "1//2", "0-3/4"})
    EXPECT_FALSE(RankSet::ParseFolded(bad).has_value()) << bad;
}

}  // namespace
}  // namespace xtimer

#include "common/rank_set.h"

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

// Pairing and round planning.
#include "netprobe/plan.h"

#include <gtest/gtest.h>

#include <set>

namespace xtimer::netprobe {
namespace {

std::vector<int> Ranks(int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(i);
  return r;
}

TEST(NeighbourRound, EvenCountIsOneStepOfNeighbours) {
  RoundPlan p = NeighbourRound(Ranks(8));
  EXPECT_EQ(p.kind, "neighbours");
  EXPECT_TRUE(p.base);
  EXPECT_EQ(p.steps, (std::vector<Step>{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}}));
}

TEST(NeighbourRound, OddNodeJoinsTheLastPair) {
  EXPECT_EQ(NeighbourRound(Ranks(7)).steps, (std::vector<Step>{{{0, 1}, {2, 3}, {4, 5}}, {{4, 6}}}));
  EXPECT_EQ(NeighbourRound(Ranks(3)).steps, (std::vector<Step>{{{0, 1}}, {{0, 2}}}));
  EXPECT_TRUE(NeighbourRound(Ranks(1)).steps.empty());
  EXPECT_TRUE(NeighbourRound({}).steps.empty());
  EXPECT_EQ(NeighbourRound(Ranks(2)).steps, (std::vector<Step>{{{0, 1}}}));
}

TEST(NeighbourRound, SkipsMissingNodesAndSortsInput) {
  EXPECT_EQ(NeighbourRound({5, 0, 3, 1, 3}).steps, (std::vector<Step>{{{0, 1}, {3, 5}}}));
  EXPECT_EQ(NeighbourRound({5, 0, 3, 1}).steps, (std::vector<Step>{{{0, 1}, {3, 5}}}));
  EXPECT_EQ(NeighbourRound({6, 2, 4}).steps, (std::vector<Step>{{{2, 4}}, {{2, 6}}}));
}

// Every pair exactly once, in n-1 rounds (n even) or n rounds with one bye each (n odd), and the
// pairs of a round disjoint.
class AllPairs : public ::testing::TestWithParam<int> {};

TEST_P(AllPairs, CircleMethodCoversEveryPairOnce) {
  const int n = GetParam();
  std::vector<RoundPlan> rounds = AllPairsRounds(Ranks(n));
  const size_t expected_rounds = n < 2 ? 0 : (n % 2 == 0 ? n - 1 : n);
  ASSERT_EQ(rounds.size(), expected_rounds);
  std::set<Pair> seen;
  std::vector<int> idle(n, 0);
  for (const RoundPlan& r : rounds) {
    EXPECT_EQ(r.kind, "all-pairs");
    ASSERT_EQ(r.steps.size(), 1u);
    EXPECT_EQ(r.steps[0].size(), static_cast<size_t>(n / 2));
    std::set<int> busy;
    for (const Pair& p : r.steps[0]) {
      EXPECT_LT(p.first, p.second);
      EXPECT_TRUE(busy.insert(p.first).second) << "node " << p.first << " twice in a round";
      EXPECT_TRUE(busy.insert(p.second).second) << "node " << p.second << " twice in a round";
      EXPECT_TRUE(seen.insert(p).second) << p.first << "-" << p.second << " twice";
    }
    for (int i = 0; i < n; ++i) idle[i] += busy.count(i) == 0 ? 1 : 0;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n * (n - 1) / 2));
  for (int i = 0; i < n && n >= 2; ++i) EXPECT_EQ(idle[i], n % 2) << "node " << i;
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllPairs, ::testing::Values(1, 2, 3, 4, 5, 7, 8, 9, 16, 17));

TEST(AllPairsRounds, UsesThePresentRanks) {
  std::vector<RoundPlan> rounds = AllPairsRounds({0, 2, 5, 9});
  ASSERT_EQ(rounds.size(), 3u);
  std::set<Pair> seen;
  for (const RoundPlan& r : rounds)
    for (const Pair& p : r.steps[0]) seen.insert(p);
  EXPECT_EQ(seen, (std::set<Pair>{{0, 2}, {0, 5}, {0, 9}, {2, 5}, {2, 9}, {5, 9}}));
}

TEST(FollowUpRound, SpreadsSuspectsOverStepsWhenPartnersAreFew) {
  // 3 healthy nodes (0, 1, 2) and 5 undecided ones: a partner takes one suspect per step.
  Verdict v;
  v.nodes.resize(8);
  for (int r = 0; r < 8; ++r) v.nodes[r].rank = r;
  for (int r = 0; r < 3; ++r) {
    v.nodes[r].status = NodeStatus::kOk;
    v.nodes[r].good_partners = {(r + 1) % 3};
    v.nodes[r].time_s = 1.0 + r;  // 0 is the fastest
  }
  for (int r = 3; r < 8; ++r) {
    v.nodes[r].status = NodeStatus::kUndecided;
    v.undecided.push_back(r);
  }
  std::vector<TestResult> tests;
  auto plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  EXPECT_FALSE(plan->base);
  EXPECT_EQ(plan->steps, (std::vector<Step>{{{0, 3}, {1, 4}, {2, 5}}, {{0, 6}, {1, 7}}}));
  // A suspect that already tried every healthy node is left out.
  TestResult t;
  for (int p = 0; p < 3; ++p) {
    t.a = p;
    t.b = 7;
    tests.push_back(t);
  }
  plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  for (const Step& s : plan->steps)
    for (const Pair& p : s) EXPECT_NE(p.second, 7);
}

}  // namespace
}  // namespace xtimer::netprobe

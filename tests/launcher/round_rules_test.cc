// The etcd rendezvous' rules (launcher/run/round_rules.h): how many nodes a round takes, which
// group rank each gets, when an open round closes, and when waiting nodes are worth a new round.
#include "launcher/run/round_rules.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace xtimer::run {
namespace {

using Ids = std::vector<std::string>;

TEST(RoundRules, SizeIsAtMostMaxAndAMultipleOfTheNodeUnit) {
  RoundLimits l{2, 4, 1};
  EXPECT_EQ(RoundSize(1, l), 0);  // below MIN
  EXPECT_EQ(RoundSize(2, l), 2);
  EXPECT_EQ(RoundSize(3, l), 3);
  EXPECT_EQ(RoundSize(9, l), 4);  // the rest wait
  RoundLimits unit{2, 5, 2};
  EXPECT_EQ(RoundSize(2, unit), 2);
  EXPECT_EQ(RoundSize(3, unit), 2);  // one waits
  EXPECT_EQ(RoundSize(5, unit), 4);  // MAX 5 holds two units
  RoundLimits high_min{3, 6, 2};
  EXPECT_EQ(RoundSize(3, high_min), 0);  // two nodes would be below MIN
  EXPECT_EQ(RoundSize(4, high_min), 4);
}

TEST(RoundRules, NodesKeepTheirRankAndNewcomersFillTheGaps) {
  // Round before: a=0, b=1, c=2, d=3; c was lost; e and f are new, f came first.
  std::vector<Candidate> c = {{"d", 3, 10}, {"e", -1, 31}, {"a", 0, 12}, {"f", -1, 30}, {"b", 1, 11}};
  EXPECT_EQ(AssignGroupRanks(c, 5), (Ids{"a", "b", "f", "d", "e"}));
  // Only four fit: the newest newcomer waits.
  EXPECT_EQ(AssignGroupRanks(c, 4), (Ids{"a", "b", "f", "d"}));
  // Only three fit: d's rank 3 is past the end, so it takes the first free one.
  EXPECT_EQ(AssignGroupRanks(c, 3), (Ids{"a", "b", "d"}));
}

TEST(RoundRules, FirstRoundRanksFollowArrival) {
  std::vector<Candidate> c = {{"z", -1, 7}, {"y", -1, 5}, {"x", -1, 6}};
  EXPECT_EQ(AssignGroupRanks(c, 3), (Ids{"y", "x", "z"}));
  EXPECT_EQ(AssignGroupRanks(c, 2), (Ids{"y", "x"}));  // --node-unit 2: the last to come waits
  EXPECT_TRUE(AssignGroupRanks(c, 0).empty());
}

TEST(RoundRules, EveryCandidateGetsOneRankAtMost) {
  // Two nodes claim the same old rank (a stale key): both are placed, once each.
  std::vector<Candidate> c = {{"p", 1, 3}, {"q", 1, 4}, {"r", 0, 5}};
  Ids ranks = AssignGroupRanks(c, 3);
  EXPECT_EQ(ranks, (Ids{"r", "p", "q"}));
  Ids sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
}

// A re-rendezvous: round R-1 had a, b, c.
OpenRound Again(Ids joined, Ids survivors) {
  OpenRound r;
  r.joined = std::move(joined);
  r.has_previous = true;
  r.survivors = std::move(survivors);
  return r;
}

TEST(RoundRules, ReRendezvousClosesOnceEverySurvivorIsIn) {
  RoundLimits l{2, 3, 1};
  // c was lost: a and b are all that can come.
  EXPECT_EQ(ShouldClose(Again({"a"}, {"a", "b"}), l), CloseReason::kNotYet);  // below MIN
  EXPECT_EQ(ShouldClose(Again({"a", "b"}, {"a", "b"}), l), CloseReason::kEveryoneIn);
  // c still holds its lease (it failed, it did not die): it will come, so the round waits.
  EXPECT_EQ(ShouldClose(Again({"a", "b"}, {"a", "b", "c"}), l), CloseReason::kNotYet);
  EXPECT_EQ(ShouldClose(Again({"a", "b", "c"}, {"a", "b", "c"}), l), CloseReason::kFull);
}

TEST(RoundRules, ANodeWaitingOutsideHoldsTheCloseUntilItJoins) {
  RoundLimits l{2, 4, 1};
  OpenRound r = Again({"a", "b"}, {"a", "b"});
  r.waiting = {"d"};  // came while the last round ran, has not joined this one yet
  EXPECT_EQ(ShouldClose(r, l), CloseReason::kNotYet);
  r.last_call_passed = true;
  EXPECT_EQ(ShouldClose(r, l), CloseReason::kLastCallOver);  // it never came: last call decides
  r.last_call_passed = false;
  r.joined.push_back("d");  // it joined: nobody else is expected
  EXPECT_EQ(ShouldClose(r, l), CloseReason::kEveryoneIn);
}

TEST(RoundRules, FirstRoundAndFreshStartsWaitForTheLastCall) {
  RoundLimits l{2, 4, 1};
  OpenRound first;
  first.joined = {"a", "b", "c"};
  EXPECT_EQ(ShouldClose(first, l), CloseReason::kNotYet);
  first.last_call_passed = true;
  EXPECT_EQ(ShouldClose(first, l), CloseReason::kLastCallOver);
  // Every node of the last round is gone and new ones came: nothing tells who else may come.
  EXPECT_EQ(ShouldClose(Again({"x", "y"}, {}), l), CloseReason::kNotYet);
}

TEST(RoundRules, FullRoundsCloseAtOnce) {
  RoundLimits l{2, 3, 1};
  OpenRound first;
  first.joined = {"a", "b", "c", "d"};
  EXPECT_EQ(ShouldClose(first, l), CloseReason::kFull);
  RoundLimits unit{2, 3, 2};  // --nnodes 2:3 --node-unit 2: two nodes is as full as it gets
  first.joined = {"a", "b"};
  EXPECT_EQ(ShouldClose(first, unit), CloseReason::kFull);
}

TEST(RoundRules, NetworkCheckKeepsCloseWhenTheyAreIn) {
  RoundLimits l{2, 8, 1};
  OpenRound r;
  r.expect = {"a", "b", "c"};
  r.joined = {"a", "b"};
  EXPECT_EQ(ShouldClose(r, l), CloseReason::kNotYet);
  r.joined.push_back("c");
  EXPECT_EQ(ShouldClose(r, l), CloseReason::kExpectedIn);
}

TEST(RoundRules, NodeUnitSurvivorsCloseWithTheirMultiple) {
  // Four nodes in units of two, one lost: the three survivors close a round of two; the third
  // waits outside it.
  RoundLimits l{2, 4, 2};
  EXPECT_EQ(ShouldClose(Again({"a", "b", "c"}, {"a", "b", "c"}), l), CloseReason::kEveryoneIn);
  EXPECT_EQ(RoundSize(3, l), 2);
}

TEST(RoundRules, WaitingNodesAreWorthARoundOnlyWhenItGrows) {
  RoundLimits l{2, 3, 1};
  EXPECT_TRUE(WaitingNodesFit(2, 1, l));
  EXPECT_FALSE(WaitingNodesFit(3, 1, l));  // full
  EXPECT_FALSE(WaitingNodesFit(2, 0, l));
  RoundLimits unit{2, 4, 2};
  EXPECT_FALSE(WaitingNodesFit(2, 1, unit));  // 3 nodes still make a round of 2: no restart for nothing
  EXPECT_TRUE(WaitingNodesFit(2, 2, unit));
}

// --evict-slow-nodes: a slow node leaves only when the others (and the spares) still make a round.
TEST(RoundRules, ASlowNodeLeavesOnlyIfTheJobGoesOnWithoutIt) {
  RoundLimits fixed{4, 4, 1};
  EXPECT_TRUE(GoesOnWithout(4, 1, fixed));   // a spare takes its place
  EXPECT_FALSE(GoesOnWithout(4, 0, fixed));  // no spare, and 3 is below MIN: it stays
  RoundLimits elastic{3, 4, 1};
  EXPECT_TRUE(GoesOnWithout(4, 0, elastic));   // goes on with 3
  EXPECT_FALSE(GoesOnWithout(3, 0, elastic));  // 2 would be below MIN
  EXPECT_TRUE(GoesOnWithout(3, 2, elastic));
  RoundLimits unit{2, 4, 2};
  EXPECT_FALSE(GoesOnWithout(2, 0, unit));  // one node is no unit of two
  EXPECT_TRUE(GoesOnWithout(4, 0, unit));   // 3 run as 2
  EXPECT_FALSE(GoesOnWithout(0, 5, elastic));
}

}  // namespace

}  // namespace xtimer::run

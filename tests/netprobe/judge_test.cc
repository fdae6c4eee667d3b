// Judging on synthetic timings: no sockets, no clocks.
#include "netprobe/judge.h"

#include <gtest/gtest.h>

#include "netprobe/plan.h"

namespace xtimer::netprobe {
namespace {

TestResult Good(int a, int b, double time_s, double mbps = 100, int round = 1) {
  TestResult t;
  t.a = a;
  t.b = b;
  t.round = round;
  t.base = round == 1;
  t.completed = true;
  t.time_s = time_s;
  t.fwd_mbps = t.bwd_mbps = mbps;
  t.latency_us = 50;
  return t;
}

TestResult Failed(int a, int b, int round = 1) {
  TestResult t;
  t.a = a;
  t.b = b;
  t.round = round;
  t.base = round == 1;
  t.error = "connect to peer: no answer";
  return t;
}

std::vector<NodeInput> Present(int n) {
  std::vector<NodeInput> v(n);
  for (NodeInput& i : v) i.present = true;
  return v;
}

// Round 1 of n healthy nodes with `time` per test, except the tests overridden by `special`.
std::vector<TestResult> Round1(int n, double time = 1.0) {
  std::vector<TestResult> tests;
  for (const Step& s : NeighbourRound([&] {
                         std::vector<int> r;
                         for (int i = 0; i < n; ++i) r.push_back(i);
                         return r;
                       }())
                           .steps)
    for (const Pair& p : s) tests.push_back(Good(p.first, p.second, time));
  return tests;
}

void Replace(std::vector<TestResult>* tests, int a, int b, const TestResult& t) {
  for (TestResult& x : *tests)
    if (x.a == a && x.b == b) x = t;
}

const LinkVerdict* FindLink(const Verdict& v, int a, int b) {
  for (const LinkVerdict& l : v.links)
    if (l.a == a && l.b == b) return &l;
  return nullptr;
}

TEST(Median, OddEvenEmpty) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({5, 5, 5, 5}), 5);
}

TEST(Judge, HealthyNodesAreOkAfterOneRound) {
  auto tests = Round1(8);
  Verdict v = Judge(Present(8), tests, {}, false);
  EXPECT_TRUE(v.healthy());
  EXPECT_TRUE(v.undecided.empty());
  EXPECT_EQ(v.links.size(), 4u);
  EXPECT_DOUBLE_EQ(v.reference_time_s, 1.0);
  for (const NodeVerdict& n : v.nodes) EXPECT_EQ(n.status, NodeStatus::kOk) << n.rank;
  EXPECT_FALSE(FollowUpRound(v, tests).has_value());
}

TEST(Judge, SlowPairIsUndecidedThenTheStragglerIsNamed) {
  auto tests = Round1(8);
  Replace(&tests, 2, 3, Good(2, 3, 10.0, 10));
  Verdict v = Judge(Present(8), tests, {}, false);
  EXPECT_EQ(v.undecided, (std::vector<int>{2, 3}));
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kOk);

  auto plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->steps.size(), 1u);  // two fast partners, one step
  ASSERT_EQ(plan->steps[0].size(), 2u);
  int partner2 = -1, partner3 = -1;
  for (const Pair& p : plan->steps[0]) {
    if (p.first == 2 || p.second == 2) partner2 = p.first == 2 ? p.second : p.first;
    if (p.first == 3 || p.second == 3) partner3 = p.first == 3 ? p.second : p.first;
  }
  ASSERT_GE(partner2, 0);
  ASSERT_GE(partner3, 0);
  EXPECT_NE(partner2, partner3);
  EXPECT_NE(partner2, 3);

  // Node 3 is the straggler: slow again with its new partner, node 2 is fast with its own.
  tests.push_back(Good(std::min(2, partner2), std::max(2, partner2), 0.5, 200, 2));
  tests.push_back(Good(std::min(3, partner3), std::max(3, partner3), 9.0, 11, 2));
  v = Judge(Present(8), tests, {}, false);
  EXPECT_TRUE(v.undecided.empty());
  EXPECT_EQ(v.nodes[3].status, NodeStatus::kStraggler);
  EXPECT_NE(v.nodes[3].reason.find("median"), std::string::npos) << v.nodes[3].reason;
  EXPECT_EQ(v.nodes[2].status, NodeStatus::kOk);
  EXPECT_EQ(v.nodes[partner3].status, NodeStatus::kOk);
  const LinkVerdict* l = FindLink(v, 2, 3);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->status, LinkStatus::kNode);
  // The follow-up round, less loaded and faster, does not move the reference.
  EXPECT_DOUBLE_EQ(v.reference_time_s, 1.0);
  EXPECT_FALSE(v.healthy());
}

TEST(Judge, EveryNodeSlowIsNobodysStragglerButMinBandwidthFailsThem) {
  auto tests = Round1(6, 20.0);
  for (TestResult& t : tests) t.fwd_mbps = t.bwd_mbps = 5;
  Verdict v = Judge(Present(6), tests, {}, false);
  EXPECT_TRUE(v.healthy());

  JudgeConfig strict;
  strict.min_bandwidth_mbps = 50;
  v = Judge(Present(6), tests, strict, false);
  EXPECT_EQ(v.undecided.size(), 6u);
  EXPECT_FALSE(FollowUpRound(v, tests).has_value());  // nobody healthy to pair with
  v = Judge(Present(6), tests, strict, true);
  for (const NodeVerdict& n : v.nodes) {
    EXPECT_EQ(n.status, NodeStatus::kFaulty) << n.rank;
    EXPECT_NE(n.reason.find("--min-bandwidth"), std::string::npos) << n.reason;
  }
  EXPECT_FALSE(v.healthy());
}

TEST(Judge, TiesAtTheFactorAreNotStragglers) {
  // Node times 1, 1, 1, 1, 2, 2 -> median 1; a node at exactly 2 x 1 is not over it.
  std::vector<TestResult> tests = {Good(0, 1, 1), Good(2, 3, 1), Good(4, 5, 2)};
  Verdict v = Judge(Present(6), tests, {}, false);
  EXPECT_DOUBLE_EQ(v.reference_time_s, 1.0);
  EXPECT_TRUE(v.healthy());
  // Just over it is slow.
  tests[2] = Good(4, 5, 2.001);
  v = Judge(Present(6), tests, {}, false);
  EXPECT_EQ(v.undecided, (std::vector<int>{4, 5}));
}

TEST(Judge, TiesInPartnerChoiceGoToTheLowestRank) {
  auto tests = Round1(6);  // all equal times
  Replace(&tests, 0, 1, Failed(0, 1));
  Verdict v = Judge(Present(6), tests, {}, false);
  auto plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0], (Step{{0, 2}, {1, 3}}));
}

TEST(Judge, NodeFailingWithTwoPartnersIsFaulty) {
  auto tests = Round1(8);
  Replace(&tests, 4, 5, Failed(4, 5));
  Verdict v = Judge(Present(8), tests, {}, false);
  EXPECT_EQ(v.undecided, (std::vector<int>{4, 5}));
  EXPECT_EQ(FindLink(v, 4, 5)->status, LinkStatus::kUndecided);
  tests.push_back(Failed(0, 5, 2));
  tests.push_back(Good(1, 4, 0.8, 120, 2));
  v = Judge(Present(8), tests, {}, false);
  EXPECT_TRUE(v.undecided.empty());
  EXPECT_EQ(v.nodes[5].status, NodeStatus::kFaulty);
  EXPECT_TRUE(v.nodes[5].decided);
  EXPECT_NE(v.nodes[5].reason.find("0 and 4"), std::string::npos) << v.nodes[5].reason;
  EXPECT_EQ(v.nodes[4].status, NodeStatus::kOk);
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kOk);
  EXPECT_EQ(FindLink(v, 4, 5)->status, LinkStatus::kNode);
  EXPECT_EQ(FindLink(v, 0, 5)->status, LinkStatus::kNode);
  EXPECT_EQ(FindLink(v, 1, 4)->status, LinkStatus::kOk);
}

TEST(Judge, PairFailingWhileBothPassElsewhereIsABadLink) {
  auto tests = Round1(8);
  Replace(&tests, 2, 3, Failed(2, 3));
  tests.push_back(Good(0, 2, 1.0, 100, 2));
  tests.push_back(Good(1, 3, 1.0, 100, 2));
  Verdict v = Judge(Present(8), tests, {}, false);
  EXPECT_TRUE(v.undecided.empty());
  for (const NodeVerdict& n : v.nodes) EXPECT_EQ(n.status, NodeStatus::kOk) << n.rank;
  const LinkVerdict* l = FindLink(v, 2, 3);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->status, LinkStatus::kBad);
  EXPECT_NE(l->reason.find("failed"), std::string::npos);
  EXPECT_FALSE(v.healthy());
}

TEST(Judge, SlowLinkBetweenFastNodesIsABadLink) {
  auto tests = Round1(8);
  Replace(&tests, 0, 1, Good(0, 1, 8.0, 12));
  tests.push_back(Good(0, 2, 1.0, 100, 2));
  tests.push_back(Good(1, 3, 1.0, 100, 2));
  Verdict v = Judge(Present(8), tests, {}, false);
  for (const NodeVerdict& n : v.nodes) EXPECT_EQ(n.status, NodeStatus::kOk);
  // Slow once: tested again before it is blamed.
  EXPECT_EQ(FindLink(v, 0, 1)->status, LinkStatus::kUndecided);
  EXPECT_EQ(v.recheck, (std::vector<std::pair<int, int>>{{0, 1}}));
  auto plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->steps, (std::vector<Step>{{{0, 1}}}));

  auto again = tests;
  again.push_back(Good(0, 1, 7.5, 13, 3));
  v = Judge(Present(8), again, {}, false);
  EXPECT_EQ(FindLink(v, 0, 1)->status, LinkStatus::kBad);
  EXPECT_NE(FindLink(v, 0, 1)->reason.find("slow"), std::string::npos);
  EXPECT_TRUE(v.recheck.empty());
  EXPECT_FALSE(FollowUpRound(v, again).has_value());

  // A one-off stall: fine the second time.
  again.back() = Good(0, 1, 1.0, 100, 3);
  v = Judge(Present(8), again, {}, false);
  EXPECT_TRUE(v.healthy());

  // No round left: slow once is bad.
  v = Judge(Present(8), tests, {}, true);
  EXPECT_EQ(FindLink(v, 0, 1)->status, LinkStatus::kBad);
}

TEST(Judge, MoreRoundsWhenTwoCannotDecide) {
  // Round 1: 0-1 fails. Round 2: 1 passes with 3, but 0's new partner 2 left the rendezvous
  // mid-test: that failure says nothing about 0, which needs a third partner.
  auto tests = Round1(6);
  Replace(&tests, 0, 1, Failed(0, 1));
  auto inputs = Present(6);
  tests.push_back(Failed(0, 2, 2));
  tests.push_back(Good(1, 3, 1.0, 100, 2));
  inputs[2].left_reason = "left the rendezvous during the probe";
  Verdict v = Judge(inputs, tests, {}, false);
  EXPECT_EQ(v.nodes[2].status, NodeStatus::kFaulty);
  EXPECT_EQ(v.undecided, (std::vector<int>{0}));
  auto plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->steps.size(), 1u);
  ASSERT_EQ(plan->steps[0].size(), 1u);
  Pair p = plan->steps[0][0];
  EXPECT_EQ(p.first, 0);
  EXPECT_TRUE(p.second != 1 && p.second != 2) << p.second;  // a partner it has not tried

  // Round 3 fails too: now 0 failed with two partners that are fine elsewhere.
  tests.push_back(Failed(0, p.second, 3));
  v = Judge(inputs, tests, {}, false);
  EXPECT_TRUE(v.undecided.empty());
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kFaulty);
  EXPECT_EQ(FindLink(v, 0, 2)->status, LinkStatus::kNode);
}

TEST(Judge, TwoAdjacentFaultyNodesAreBothFound) {
  auto tests = Round1(8);
  Replace(&tests, 0, 1, Failed(0, 1));
  tests.push_back(Failed(0, 2, 2));
  tests.push_back(Failed(1, 3, 2));
  Verdict v = Judge(Present(8), tests, {}, false);
  EXPECT_TRUE(v.undecided.empty());
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kFaulty);
  EXPECT_EQ(v.nodes[1].status, NodeStatus::kFaulty);
  EXPECT_EQ(v.nodes[2].status, NodeStatus::kOk);
  EXPECT_EQ(v.nodes[3].status, NodeStatus::kOk);
}

TEST(Judge, OddNodeCount) {
  // 0-1, then 0-2 (the odd node joins the pair). 1 fails with 0 only: undecided, and its
  // follow-up partner is 2, the only healthy node it has not tried.
  std::vector<TestResult> tests = {Failed(0, 1), Good(0, 2, 1.0)};
  Verdict v = Judge(Present(3), tests, {}, false);
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kOk);
  EXPECT_EQ(v.nodes[2].status, NodeStatus::kOk);
  EXPECT_EQ(v.undecided, (std::vector<int>{1}));
  auto plan = FollowUpRound(v, tests);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->steps, (std::vector<Step>{{{1, 2}}}));
  tests.push_back(Failed(1, 2, 2));
  v = Judge(Present(3), tests, {}, false);
  EXPECT_EQ(v.nodes[1].status, NodeStatus::kFaulty);
}

TEST(Judge, MissingNodesAreMissing) {
  auto inputs = Present(5);
  inputs[3].present = false;
  auto plan = NeighbourRound({0, 1, 2, 4});
  EXPECT_EQ(plan.steps, (std::vector<Step>{{{0, 1}, {2, 4}}}));
  std::vector<TestResult> tests = {Good(0, 1, 1), Good(2, 4, 1)};
  Verdict v = Judge(inputs, tests, {}, true);
  EXPECT_EQ(v.nodes[3].status, NodeStatus::kMissing);
  EXPECT_FALSE(v.healthy());
  for (int r : {0, 1, 2, 4}) EXPECT_EQ(v.nodes[r].status, NodeStatus::kOk);
}

TEST(Judge, FinalVerdictWithoutEnoughRoundsIsMarkedUndecided) {
  auto tests = Round1(4);
  Replace(&tests, 2, 3, Failed(2, 3));
  Verdict v = Judge(Present(4), tests, {}, true);  // e.g. --rounds 1
  EXPECT_EQ(v.nodes[2].status, NodeStatus::kFaulty);
  EXPECT_FALSE(v.nodes[2].decided);
  EXPECT_EQ(v.nodes[3].status, NodeStatus::kFaulty);
  EXPECT_EQ(FindLink(v, 2, 3)->status, LinkStatus::kUndecided);
  EXPECT_TRUE(v.undecided.empty());
}

TEST(Judge, LocalGpuPairUnderMinBandwidthFailsTheNode) {
  auto tests = Round1(2);
  auto inputs = Present(2);
  inputs[1].local.ran = inputs[1].local.ok = true;
  inputs[1].local.pairs = {{0, 1, 20000, true}, {1, 0, 900, true}};
  JudgeConfig c;
  Verdict v = Judge(inputs, tests, c, true);
  EXPECT_TRUE(v.healthy());  // no minimum: informational only
  c.min_bandwidth_mbps = 10000;
  tests[0].fwd_mbps = tests[0].bwd_mbps = 20000;
  v = Judge(inputs, tests, c, true);
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kOk);
  EXPECT_EQ(v.nodes[1].status, NodeStatus::kFaulty);
  EXPECT_NE(v.nodes[1].reason.find("GPU 1 -> GPU 0"), std::string::npos) << v.nodes[1].reason;
  inputs[0].local.ran = true;
  inputs[0].local.error = "cudaGetDeviceCount: no CUDA-capable device is detected";
  v = Judge(inputs, tests, c, true);
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kFaulty);
  EXPECT_NE(v.nodes[0].reason.find("no CUDA-capable"), std::string::npos);
}

TEST(Judge, SingleNodeIsOkUntested) {
  Verdict v = Judge(Present(1), {}, {}, true);
  EXPECT_EQ(v.nodes[0].status, NodeStatus::kOk);
  EXPECT_FALSE(v.nodes[0].decided);
  EXPECT_TRUE(v.healthy());
}

TEST(Judge, IgnoresTestsNamingUnknownRanks) {
  std::vector<TestResult> tests = {Good(0, 1, 1), Good(1, 9, 1), Good(-1, 0, 1)};
  Verdict v = Judge(Present(2), tests, {}, true);
  EXPECT_EQ(v.links.size(), 1u);
  EXPECT_TRUE(v.healthy());
}

}  // namespace
}  // namespace xtimer::netprobe

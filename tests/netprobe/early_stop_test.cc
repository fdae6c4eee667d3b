// The early-stop rule and the judging of a stopped test, on synthetic timings: no sockets, no clocks.
#include "netprobe/early_stop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace xtimer::netprobe {
namespace {

RunningTest Ended(double s, bool completed = true) {
  RunningTest t;
  t.ended = true;
  t.completed = completed;
  t.elapsed_s = s;
  return t;
}

RunningTest Running(double s, bool stopping = false) {
  RunningTest t;
  t.elapsed_s = s;
  t.stopping = stopping;
  return t;
}

using Indices = std::vector<size_t>;

TEST(EarlyStop, NothingWhenAllAreAlike) {
  // A healthy step: the last test is a little late, well within twice the median.
  EXPECT_EQ(TestsToStop({Ended(2.0), Ended(2.1), Ended(2.2), Running(3.5)}, 2.0), Indices{});
  EXPECT_EQ(TestsToStop({Running(1.9), Running(2.0), Running(2.1)}, 2.0), Indices{});
}

TEST(EarlyStop, StopsTheLastTestOnceOverTwiceTheMedian) {
  EXPECT_EQ(TestsToStop({Ended(2.0), Ended(2.1), Ended(2.2), Running(4.1)}, 2.0), Indices{});
  EXPECT_EQ(TestsToStop({Ended(2.0), Running(4.3), Ended(2.1), Ended(2.2)}, 2.0), Indices{1});
}

TEST(EarlyStop, TheFactorIsTheStragglerFactor) {
  EXPECT_EQ(TestsToStop({Ended(2.0), Ended(2.0), Running(5.0)}, 3.0), Indices{});
  EXPECT_EQ(TestsToStop({Ended(2.0), Ended(2.0), Running(6.5)}, 3.0), Indices{2});
}

TEST(EarlyStop, NeverBeforeTheMinimum) {
  // The others took 0.1 s: twice that is no time to measure in.
  EXPECT_EQ(TestsToStop({Ended(0.1), Ended(0.1), Running(0.9)}, 2.0), Indices{});
  EXPECT_EQ(TestsToStop({Ended(0.1), Ended(0.1), Running(kMinStopS + 0.01)}, 2.0), Indices{2});
}

TEST(EarlyStop, WaitsWhileAnotherTestCouldStillEndInTime) {
  EXPECT_EQ(TestsToStop({Ended(1.0), Ended(1.0), Running(1.8), Running(9.0)}, 2.0), Indices{});
}

TEST(EarlyStop, StopsEveryTestOverTheLimit) {
  // A slow test and one stuck connecting (a black-holed peer): both are told; the stuck one
  // ignores it (nothing moves yet) and fails at its connect deadline.
  EXPECT_EQ(TestsToStop({Ended(0.2), Running(2.0), Ended(0.3), Running(2.0)}, 2.0), (Indices{1, 3}));
}

TEST(EarlyStop, NotTwice) {
  EXPECT_EQ(TestsToStop({Ended(1.0), Running(5.0, true)}, 2.0), Indices{});
  EXPECT_EQ(TestsToStop({Ended(1.0), Running(5.0, true), Running(5.0)}, 2.0), Indices{2});
}

TEST(EarlyStop, NoYardstickWithoutACompletedTest) {
  EXPECT_EQ(TestsToStop({Running(30.0)}, 2.0), Indices{});  // alone in its step
  EXPECT_EQ(TestsToStop({Ended(0.5, false), Ended(4.0, false), Running(30.0)}, 2.0), Indices{});
  EXPECT_EQ(TestsToStop({}, 2.0), Indices{});
}

TEST(EarlyStop, FailedTestsAreNoPartOfTheMedian) {
  // Median of the completed ones (1.0), not of everything that ended (4.0).
  EXPECT_EQ(TestsToStop({Ended(1.0), Ended(4.0, false), Ended(4.0, false), Running(2.5)}, 2.0), Indices{3});
}

StoppedTransfer Transfer(int64_t size, int64_t fb, double fs, int64_t bb, double bs) {
  StoppedTransfer s;
  s.size = size;
  s.fwd_bytes = fb;
  s.fwd_s = fs;
  s.bwd_bytes = bb;
  s.bwd_s = bs;
  return s;
}

TEST(PartialResult, StoppedForwardTakesTheBackwardAtTheSameRate) {
  TestResult t;
  std::string error;
  // 10 MB in 2 s of a 100 MB test: 5 MB/s, 20 s per direction.
  ASSERT_TRUE(PartialResult(Transfer(100'000'000, 10'000'000, 2.0, 0, 0), 2.5, &t, &error)) << error;
  EXPECT_TRUE(t.completed);
  EXPECT_TRUE(t.stopped);
  EXPECT_DOUBLE_EQ(t.fwd_mbps, 5);
  EXPECT_DOUBLE_EQ(t.bwd_mbps, 5);
  EXPECT_DOUBLE_EQ(t.time_s, 40);
  EXPECT_NE(t.stop_note.find("stopped after 2.5 s"), std::string::npos) << t.stop_note;
  EXPECT_NE(t.stop_note.find("backward taken at the same rate"), std::string::npos) << t.stop_note;
}

TEST(PartialResult, StoppedBackwardKeepsTheMeasuredForward) {
  TestResult t;
  std::string error;
  ASSERT_TRUE(PartialResult(Transfer(100'000'000, 100'000'000, 0.5, 4'000'000, 4.0), 5, &t, &error)) << error;
  EXPECT_TRUE(t.completed);
  EXPECT_DOUBLE_EQ(t.fwd_mbps, 200);
  EXPECT_DOUBLE_EQ(t.bwd_mbps, 1);
  EXPECT_DOUBLE_EQ(t.bandwidth_mbps(), 1);
  EXPECT_DOUBLE_EQ(t.time_s, 100.5);
  EXPECT_EQ(t.stop_note.find("same rate"), std::string::npos) << t.stop_note;
}

TEST(PartialResult, NoByteMovedIsAFailure) {
  TestResult t;
  std::string error;
  ASSERT_TRUE(PartialResult(Transfer(1000, 0, 1.5, 0, 0), 2, &t, &error)) << error;
  EXPECT_FALSE(t.completed);
  EXPECT_TRUE(t.stopped);
  EXPECT_NE(t.error.find("no byte moved forward"), std::string::npos) << t.error;
  ASSERT_TRUE(PartialResult(Transfer(1000, 1000, 0.1, 0, 1.0), 2, &t, &error)) << error;
  EXPECT_FALSE(t.completed);
  EXPECT_NE(t.error.find("no byte moved backward"), std::string::npos) << t.error;
  ASSERT_TRUE(PartialResult(Transfer(1000, 0, 0, 0, 0), 2, &t, &error)) << error;
  EXPECT_FALSE(t.completed);
  EXPECT_NE(t.error.find("either way"), std::string::npos) << t.error;
}

TEST(PartialResult, RefusesFiguresThatCannotBeATransfer) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const StoppedTransfer& s :
       {Transfer(1000, 1001, 1, 0, 0), Transfer(1000, -1, 1, 0, 0), Transfer(1000, 10, 0, 0, 0),
        Transfer(1000, 10, -1, 0, 0), Transfer(1000, 10, nan, 0, 0), Transfer(1000, 10, inf, 0, 0),
        Transfer(1000, 1000, 1, 2000, 1), Transfer(1000, 1000, 1, 5, nan), Transfer(0, 0, 0, 0, 0),
        Transfer(-5, 0, 0, 0, 0)}) {
    TestResult t;
    std::string error;
    EXPECT_FALSE(PartialResult(s, 1, &t, &error));
    EXPECT_NE(error.find("stopped test"), std::string::npos) << error;
    EXPECT_FALSE(t.completed);
  }
}

// What the judge makes of it: a stopped slow test is a straggler's evidence, a stopped test
// without a byte a faulty node's, a black-holed node stays faulty.
TEST(PartialResult, JudgedFromItsRate) {
  std::vector<NodeInput> nodes(8);
  for (NodeInput& n : nodes) n.present = true;
  auto good = [](int a, int b, int round) {
    TestResult t;
    t.a = a;
    t.b = b;
    t.round = round;
    t.base = round == 1;
    t.completed = true;
    t.time_s = 0.4;
    t.fwd_mbps = t.bwd_mbps = 335;
    return t;
  };
  auto stopped = [](int a, int b, int round, int64_t fwd_bytes) {
    TestResult t;
    t.a = a;
    t.b = b;
    t.round = round;
    t.base = round == 1;
    std::string error;
    EXPECT_TRUE(PartialResult(Transfer(64 << 20, 64 << 20, 0.2, fwd_bytes, 3.5), 4, &t, &error)) << error;
    return t;
  };
  auto failed = [](int a, int b, int round) {
    TestResult t;
    t.a = a;
    t.b = b;
    t.round = round;
    t.base = round == 1;
    t.error = "connect: no answer";
    return t;
  };
  // Node 3 sends at 1 MB/s; node 6 is black-holed.
  std::vector<TestResult> tests = {good(0, 1, 1), stopped(2, 3, 1, 3'500'000), good(4, 5, 1),   failed(6, 7, 1),
                                   good(0, 2, 2), stopped(1, 3, 2, 3'400'000), failed(4, 6, 2), good(5, 7, 2)};
  Verdict v = Judge(nodes, tests, JudgeConfig{}, false);
  EXPECT_EQ(v.nodes[3].status, NodeStatus::kStraggler) << v.nodes[3].reason;
  EXPECT_EQ(v.nodes[6].status, NodeStatus::kFaulty) << v.nodes[6].reason;
  for (int r : {0, 1, 2, 4, 5, 7}) EXPECT_EQ(v.nodes[r].status, NodeStatus::kOk) << r << ": " << v.nodes[r].reason;
  EXPECT_NEAR(v.nodes[3].bandwidth_mbps, 1.0, 0.03);
  // The same node with no byte moved in its stopped tests is faulty.
  tests[1] = stopped(2, 3, 1, 0);
  tests[5] = stopped(1, 3, 2, 0);
  v = Judge(nodes, tests, JudgeConfig{}, false);
  EXPECT_EQ(v.nodes[3].status, NodeStatus::kFaulty) << v.nodes[3].reason;
}

}  // namespace
}  // namespace xtimer::netprobe

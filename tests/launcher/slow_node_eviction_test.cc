// xtimer_run --evict-slow-nodes: the rule (launcher/agent/slow_node_eviction.h) on verdicts made
// by hand: which causes evict, for how long and at what cost, and when never.
#include "launcher/agent/slow_node_eviction.h"

#include <gtest/gtest.h>

namespace xtimer {
namespace {

using slowdown::Cause;
using slowdown::Finding;
using slowdown::Scope;
using slowdown::Verdict;

const char* kNodes[] = {"n0", "n1", "n2", "n3"};

Finding Slow(const std::string& node, Cause cause, Scope scope, double cost = 0.4) {
  Finding f;
  f.node = node;
  f.cause = cause;
  f.scope = scope;
  f.rank = scope == Scope::kRank ? 2 : -1;
  f.cost = cost;
  f.since = 1000;
  f.detail = "GEMM bf16 4096x4096x4096 at 0.50x its peers";
  f.key = std::string(slowdown::ScopeName(scope)) + " " + node + " " + slowdown::CauseName(cause);
  return f;
}

// A verdict of a job of four nodes, one rank each, at `t` (an agent's lists its own ranks only;
// the rule is told the job's size).
Verdict At(double t, std::vector<Finding> slow = {}) {
  Verdict v;
  v.updated = t;
  v.judged = true;
  v.step_time_s = 0.1;
  for (int r = 0; r < 4; ++r) {
    slowdown::RankStatus s;
    s.rank = r;
    s.node = kNodes[r];
    v.ranks.push_back(s);
  }
  v.slow = std::move(slow);
  return v;
}

// Verdicts every 2 s from t=1000 to `until`, each naming `f` (none when `f` is null).
std::deque<Verdict> Series(double until, const Finding* f) {
  std::deque<Verdict> h;
  for (double t = 1000; t <= until; t += 2) h.push_back(f ? At(t, {*f}) : At(t));
  return h;
}

TEST(SlowNodeEviction, ASlowGpuNamedLongEnoughEvictsItsNode) {
  EvictionThresholds t;  // the flags' defaults: 20% of the step, 10 s
  Finding f = Slow("n2", Cause::kGpuCompute, Scope::kNode);
  EvictionCall call = JudgeEviction(Series(1010, &f), "n2", 4, t);
  EXPECT_TRUE(call.evict) << call.reason;
  EXPECT_DOUBLE_EQ(call.named_for_s, 10);
  EXPECT_EQ(call.finding.key, f.key);
  EXPECT_EQ(call.key, f.key);
  EXPECT_NE(call.reason.find("node n2 gpu_compute"), std::string::npos) << call.reason;
  EXPECT_NE(call.reason.find("cost 40%"), std::string::npos) << call.reason;
  // One rank's GPU of several on the node: the GPU stays with the node too.
  Finding r = Slow("n2", Cause::kGpuCompute, Scope::kRank);
  EXPECT_TRUE(JudgeEviction(Series(1012, &r), "n2", 4, t).evict);
  // Only the named node leaves; the others are not concerned.
  EvictionCall other = JudgeEviction(Series(1010, &f), "n1", 4, t);
  EXPECT_FALSE(other.evict);
  EXPECT_TRUE(other.reason.empty()) << other.reason;
}

// Over the gRPC link a verdict's findings come without their key: the same slowdown is still
// told from another one.
TEST(SlowNodeEviction, FindingsWithoutKeysAreToldApart) {
  EvictionThresholds t;
  Finding gpu = Slow("n2", Cause::kGpuCompute, Scope::kRank);
  Finding net = Slow("n2", Cause::kNetwork, Scope::kNode);
  gpu.key.clear();
  net.key.clear();
  EvictionCall alone = JudgeEviction(Series(1010, &gpu), "n2", 4, t);
  EXPECT_TRUE(alone.evict);
  EXPECT_EQ(alone.key, "rank 2 gpu_compute");
  std::deque<Verdict> h = Series(1010, &net);  // 1000..1010 the network, then its GPU
  h.push_back(At(1012, {gpu}));
  EvictionCall call = JudgeEviction(h, "n2", 4, t);
  EXPECT_FALSE(call.evict) << call.reason;
  EXPECT_DOUBLE_EQ(call.named_for_s, 0);
  EXPECT_NE(call.reason.find("rank 2 gpu_compute on n2"), std::string::npos) << call.reason;
}

TEST(SlowNodeEviction, NotBeforeTheDurationNorBelowTheCost) {
  EvictionThresholds t;
  Finding f = Slow("n2", Cause::kGpuCompute, Scope::kNode);
  EvictionCall early = JudgeEviction(Series(1008, &f), "n2", 4, t);
  EXPECT_FALSE(early.evict);
  EXPECT_NE(early.reason.find("for 8 s of the 10 s (--evict-slow-after)"), std::string::npos) << early.reason;
  EXPECT_TRUE(early.say_once.empty());  // it may still come
  Finding cheap = Slow("n2", Cause::kGpuCompute, Scope::kNode, 0.15);
  EvictionCall low = JudgeEviction(Series(1030, &cheap), "n2", 4, t);
  EXPECT_FALSE(low.evict);
  EXPECT_NE(low.reason.find("below --evict-slow-cost 0.20"), std::string::npos) << low.reason;
  // The thresholds are the flags'.
  t.sustain_s = 30;
  EXPECT_FALSE(JudgeEviction(Series(1020, &f), "n2", 4, t).evict);
  EXPECT_TRUE(JudgeEviction(Series(1030, &f), "n2", 4, t).evict);
  t.min_cost = 0.1;
  EXPECT_TRUE(JudgeEviction(Series(1030, &cheap), "n2", 4, t).evict);
}

TEST(SlowNodeEviction, ABreakInTheSeriesStartsTheCountAgain) {
  EvictionThresholds t;
  Finding f = Slow("n2", Cause::kGpuCompute, Scope::kNode);
  std::deque<Verdict> h = Series(1020, &f);
  h[5] = At(h[5].updated);  // t=1010: healthy for one evaluation
  EvictionCall call = JudgeEviction(h, "n2", 4, t);
  EXPECT_FALSE(call.evict);
  EXPECT_DOUBLE_EQ(call.named_for_s, 8);  // 1012..1020
  // Unjudged verdicts at the end are skipped: the newest judged one decides.
  std::deque<Verdict> tail = Series(1012, &f);
  Verdict unjudged;
  unjudged.updated = 1014;
  tail.push_back(unjudged);
  EXPECT_TRUE(JudgeEviction(tail, "n2", 4, t).evict);
  EXPECT_FALSE(JudgeEviction({}, "n2", 4, t).evict);
}

TEST(SlowNodeEviction, ANetworkSlowdownEvictsOnlyWhenPinnedOnTheNode) {
  EvictionThresholds t;
  Finding node = Slow("n1", Cause::kNetwork, Scope::kNode);
  EXPECT_TRUE(JudgeEviction(Series(1010, &node), "n1", 4, t).evict);
  Finding link = Slow("n1", Cause::kNetwork, Scope::kLink);
  link.peer = "n2";
  EvictionCall call = JudgeEviction(Series(1060, &link), "n1", 4, t);
  EXPECT_FALSE(call.evict);
  EXPECT_FALSE(call.say_once.empty());
}

// Host, GC and DataLoader slowdowns would follow the job to any node: reported, never acted on.
TEST(SlowNodeEviction, CausesThatFollowTheJobNeverEvict) {
  EvictionThresholds t;
  for (Cause c : {Cause::kHost, Cause::kPythonGc, Cause::kDataLoading}) {
    for (Scope s : {Scope::kRank, Scope::kNode}) {
      Finding f = Slow("n3", c, s, 0.9);
      EvictionCall call = JudgeEviction(Series(1300, &f), "n3", 4, t);
      EXPECT_FALSE(call.evict) << f.key;
      EXPECT_NE(call.reason.find("would follow the job to any node"), std::string::npos) << call.reason;
      EXPECT_EQ(call.say_once, "cause " + f.key);
    }
  }
}

// Every node slowing down together is the job's slowdown, whether the judge says "job" or names
// the nodes one by one.
TEST(SlowNodeEviction, EveryNodeSlowTogetherEvictsNobody) {
  EvictionThresholds t;
  Finding job = Slow("", Cause::kGpuCompute, Scope::kJob, 0.5);
  job.key = "job gpu_compute";
  std::deque<Verdict> h = Series(1060, &job);
  for (const char* n : kNodes) EXPECT_FALSE(JudgeEviction(h, n, 4, t).evict) << n;
  std::deque<Verdict> all;
  for (double at = 1000; at <= 1060; at += 2) {
    std::vector<Finding> slow;
    for (const char* n : kNodes) slow.push_back(Slow(n, Cause::kGpuCompute, Scope::kNode));
    all.push_back(At(at, slow));
  }
  for (const char* n : kNodes) {
    EvictionCall call = JudgeEviction(all, n, 4, t);
    EXPECT_FALSE(call.evict) << n;
    EXPECT_NE(call.reason.find("4 of the job's 4 node(s)"), std::string::npos) << call.reason;
  }
  // Three of four: still the job. Two of four: each may leave (one a round, by the rendezvous).
  std::deque<Verdict> three, two;
  for (double at = 1000; at <= 1060; at += 2) {
    three.push_back(At(at, {Slow("n0", Cause::kGpuCompute, Scope::kNode), Slow("n1", Cause::kGpuCompute, Scope::kNode),
                            Slow("n2", Cause::kNetwork, Scope::kNode)}));
    two.push_back(At(at, {Slow("n0", Cause::kGpuCompute, Scope::kNode), Slow("n1", Cause::kGpuCompute, Scope::kNode)}));
  }
  EXPECT_FALSE(JudgeEviction(three, "n0", 4, t).evict);
  EXPECT_TRUE(JudgeEviction(two, "n0", 4, t).evict);
  // A node alone is the whole job.
  Finding f = Slow("n2", Cause::kGpuCompute, Scope::kNode);
  EXPECT_FALSE(JudgeEviction(Series(1060, &f), "n2", 1, t).evict);
  EXPECT_TRUE(JudgeEviction(Series(1060, &f), "n2", 2, t).evict);
}

TEST(SlowNodeEviction, TheHistoryKeepsWhatTheRuleNeeds) {
  EvictionThresholds t;
  std::deque<Verdict> h;
  for (double at = 1000; at <= 1200; at += 2) {
    KeepVerdict(&h, At(at), t);
    KeepVerdict(&h, At(at), t);  // the same evaluation again: kept once
  }
  EXPECT_EQ(h.back().updated, 1200);
  EXPECT_GE(h.front().updated, 1200 - t.sustain_s - 30);
  EXPECT_LE(h.front().updated, 1200 - t.sustain_s - 28);
}

// What the collector is told of an eviction: the etcd key's record as xtimer_run writes it, and
// the log line; a record that is not one is refused with a one-line reason.
TEST(SlowNodeEviction, TheRecordBecomesTheCollectorsMessage) {
  const std::string record =
      R"({"node":"host4-5021-9f2c01","name":"node2","round":3,"group_rank":2,"cause":"gpu_compute","scope":"node",)"
      R"("cost":0.44,"since":1764650000.123,"named_for_s":10,"detail":"GEMM at 0.50x","spares":1,"time":1764650010.5})";
  v1::NodeEviction e;
  std::string error;
  ASSERT_TRUE(EvictionOfRecord(record, "node node2 (group rank 2) evicted as slow", &e, &error)) << error;
  EXPECT_EQ(e.node(), "host4-5021-9f2c01");
  EXPECT_EQ(e.name(), "node2");
  EXPECT_EQ(e.round(), 3);
  EXPECT_EQ(e.group_rank(), 2);
  EXPECT_EQ(e.cause(), "gpu_compute");
  EXPECT_EQ(e.scope(), "node");
  EXPECT_DOUBLE_EQ(e.cost(), 0.44);
  EXPECT_DOUBLE_EQ(e.since(), 1764650000.123);
  EXPECT_DOUBLE_EQ(e.named_for_s(), 10);
  EXPECT_EQ(e.detail(), "GEMM at 0.50x");
  EXPECT_EQ(e.spares(), 1);
  EXPECT_DOUBLE_EQ(e.time(), 1764650010.5);
  EXPECT_EQ(e.reason(), "node node2 (group rank 2) evicted as slow");

  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "not a JSON object"},
           {"[1]", "not a JSON object"},
           {R"({"name":"n","cause":"gpu_compute","round":"3"})", "\"round\" is not an integer"},
           {R"({"name":"n","cause":"gpu_compute","round":-1})", "\"round\" is not an integer"},
           {R"({"name":"n","cause":"gpu_compute","cost":"44%"})", "\"cost\" is not a finite number"},
           {R"({"cause":"gpu_compute"})", "\"name\" is missing"},
           {R"({"name":7,"cause":"gpu_compute"})", "\"name\" is not a string"},
           {R"({"name":"n"})", "\"cause\" is missing"},
       }) {
    error.clear();
    EXPECT_FALSE(EvictionOfRecord(bad, "", &e, &error)) << bad;
    EXPECT_NE(error.find(why), std::string::npos) << bad << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace xtimer

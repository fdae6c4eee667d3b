// The judge on simulated jobs (synthetic_job.h): for each cause, the right rank (node, link or the
// job), cause and scope within 15 s of the onset at the default settings, and nothing else named
// at any time; a healthy job, with a checkpoint-like pause every 50 steps, clocks seconds apart
// or noise, names nothing.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <sstream>

#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_verdict_json.h"
#include "tests/slowdown/synthetic_job.h"

namespace xtimer::slowdown {
namespace {

using sim::Evaluation;
using sim::Injection;
using sim::JobConfig;
using sim::RunJob;

constexpr double kOnset = 60;   // seconds after the start
constexpr double kBudget = 15;  // the goal: named within this of the onset

std::string Describe(const Finding& f) {
  std::ostringstream s;
  s << ScopeName(f.scope) << " " << (f.scope == Scope::kRank ? std::to_string(f.rank) : f.node) << " "
    << CauseName(f.cause) << " (" << f.detail << ")";
  return s.str();
}

using Match = std::function<bool(const Finding&)>;

// The first time (seconds after the start) a finding matches; -1 if none ever does.
double FirstTime(const std::vector<Evaluation>& evals, const Match& m) {
  for (const Evaluation& e : evals)
    for (const Finding& f : e.verdict.slow)
      if (m(f)) return e.t;
  return -1;
}

// Every finding, at any time, that does not match.
std::vector<std::string> Others(const std::vector<Evaluation>& evals, const Match& m) {
  std::vector<std::string> out;
  for (const Evaluation& e : evals)
    for (const Finding& f : e.verdict.slow)
      if (!m(f)) out.push_back("at " + std::to_string(e.t) + " s: " + Describe(f));
  return out;
}

const Finding* Last(const std::vector<Evaluation>& evals, const Match& m) {
  for (auto e = evals.rbegin(); e != evals.rend(); ++e)
    for (const Finding& f : e->verdict.slow)
      if (m(f)) return &f;
  return nullptr;
}

Match RankIs(int rank, Cause cause) {
  return [=](const Finding& f) { return f.scope == Scope::kRank && f.rank == rank && f.cause == cause; };
}

void ExpectFoundInTime(const std::vector<Evaluation>& evals, const Match& m, const char* what) {
  double t = FirstTime(evals, m);
  EXPECT_GE(t, kOnset) << what << ": never named, or named before the onset";
  EXPECT_LE(t, kOnset + kBudget) << what << ": named " << t - kOnset << " s after the onset";
  for (const std::string& o : Others(evals, m)) ADD_FAILURE() << what << ": something else named " << o;
}

TEST(Judge, SlowGpuOnOneRank) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 3, 2.0, kOnset}};
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(evals, RankIs(3, Cause::kGpuCompute), "slow GPU");
  const Finding* f = Last(evals, RankIs(3, Cause::kGpuCompute));
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->detail.find("GEMM bf16 4096x4096x4096 at 0.5"), std::string::npos) << f->detail;
  EXPECT_EQ(f->node, "node0");
  // 0.08 s more per step on a step of about 0.21 s: it costs about 38% of the job's step time.
  EXPECT_NEAR(f->cost, 0.08 / 0.21, 0.06);
  EXPECT_LT(f->score, 0.7);
  EXPECT_NEAR(f->since, c.start + kOnset, 1.0) << "since: where the slow steps began";
}

TEST(Judge, SlowNetworkOfOneNodeWithSeveralCommunicators) {
  JobConfig c;
  c.injections = {{Injection::kSlowNode, 1, 4.0, kOnset}};
  auto evals = RunJob(c, 100);
  Match node1 = [](const Finding& f) {
    return f.scope == Scope::kNode && f.node == "node1" && f.cause == Cause::kNetwork && f.rank == -1;
  };
  ExpectFoundInTime(evals, node1, "slow network of node1");
  const Finding* f = Last(evals, node1);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->ranks, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_GT(f->cost, 0.2);
  EXPECT_NEAR(f->since, c.start + kOnset, 1.5);
}

// The node's own all-reduce comes first: while its network is slow, its ranks reach the world's
// all-reduce late, and as the slowdown comes and goes only part of a window is slow. That
// lateness is the network's (its transfers explain it), never the node's host, neither during
// the slowdown nor after it.
TEST(Judge, SlowNetworkOfOneNodeMakesItsRanksLateButNotHostStragglers) {
  JobConfig c;
  c.node_first = true;
  c.node_transfer_s = 0.04;
  c.noise = 0.05;
  c.injections = {{Injection::kSlowNode, 1, 4.0, kOnset, kOnset + 15}};
  auto evals = RunJob(c, 110);
  Match node1 = [](const Finding& f) {
    return f.scope == Scope::kNode && f.node == "node1" && f.cause == Cause::kNetwork && f.rank == -1;
  };
  ExpectFoundInTime(evals, node1, "slow network of node1, node all-reduce first");
  EXPECT_TRUE(evals.back().verdict.slow.empty()) << "over at the end";
}

TEST(Judge, SlowLinkBetweenTwoOfThreeNodes) {
  JobConfig c;
  c.nodes = 3;
  c.per_node = 2;
  c.world_transfer_s = 0.01;
  c.pair_transfer_s = 0.02;
  c.injections = {{Injection::kSlowLink, 0, 5.0, kOnset}};  // nodes 0 and 1
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(
      evals,
      [](const Finding& f) {
        return f.scope == Scope::kLink && f.cause == Cause::kNetwork && f.node == "node0" && f.peer == "node1";
      },
      "slow link node0-node1");
}

TEST(Judge, HostStragglerIsNamedWithItsPythonFunction) {
  JobConfig c;
  c.injections = {{Injection::kHost, 5, 0.1, kOnset}};
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(evals, RankIs(5, Cause::kHost), "host straggler");
  // The judge asked rank 5 for samples; once they came, the function is named.
  double named = FirstTime(evals, [](const Finding& f) {
    return f.rank == 5 && f.detail.find("slow_fn (train.py:40)") != std::string::npos;
  });
  EXPECT_GE(named, kOnset);
  EXPECT_LE(named, kOnset + kBudget) << "slow_fn named " << named - kOnset << " s after the onset";
  const Finding* f = Last(evals, RankIs(5, Cause::kHost));
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->detail.find("slow_fn (train.py:40) in "), std::string::npos) << f->detail;
  // The suspect is asked for samples, and one peer on its node to compare with; nobody else.
  std::set<int32_t> asked;
  for (const Evaluation& e : evals)
    for (const SampleRequest& s : e.verdict.samples) asked.insert(s.rank);
  EXPECT_EQ(asked, (std::set<int32_t>{4, 5}));
}

TEST(Judge, GcPausesOnOneRank) {
  JobConfig c;
  c.injections = {{Injection::kGc, 2, 0.1, kOnset}};
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(evals, RankIs(2, Cause::kPythonGc), "GC pauses");
}

TEST(Judge, SlowDataLoaderOnOneRank) {
  JobConfig c;
  c.injections = {{Injection::kData, 6, 0.12, kOnset}};
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(evals, RankIs(6, Cause::kDataLoading), "slow DataLoader");
  const Finding* f = Last(evals, RankIs(6, Cause::kDataLoading));
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->detail.find("DataLoader __next__"), std::string::npos) << f->detail;
}

TEST(Judge, SlowdownOfEveryRankIsTheJobsAndNamesNoRank) {
  JobConfig c;
  c.injections = {{Injection::kJobData, 0, 0.1, kOnset}};
  auto evals = RunJob(c, 100);
  Match job = [](const Finding& f) {
    return f.scope == Scope::kJob && f.cause == Cause::kDataLoading && f.rank == -1 && f.ranks.empty();
  };
  ExpectFoundInTime(evals, job, "every rank's DataLoader");
  const Finding* f = Last(evals, job);
  ASSERT_NE(f, nullptr);
  EXPECT_LT(f->score, 0.75);
  EXPECT_GT(evals.back().verdict.baseline_step_time_s, 0.1);
  EXPECT_LT(evals.back().verdict.baseline_step_time_s, evals.back().verdict.step_time_s);
}

TEST(Judge, SlowerKernelsOnEveryRankAreTheJobsGpuCompute) {
  JobConfig c;
  c.injections = {{Injection::kJobGemm, 0, 2.0, kOnset}};
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(
      evals, [](const Finding& f) { return f.scope == Scope::kJob && f.cause == Cause::kGpuCompute; },
      "every rank's kernels");
}

TEST(Judge, HealthyJobWithACheckpointEvery50StepsNamesNothing) {
  JobConfig c;
  c.checkpoint_every = 50;
  c.checkpoint_s = 2;
  auto evals = RunJob(c, 150);
  for (const std::string& o : Others(evals, [](const Finding&) { return false; })) ADD_FAILURE() << o;
  ASSERT_FALSE(evals.empty());
  EXPECT_TRUE(evals.back().verdict.judged);
  EXPECT_EQ(evals.back().verdict.ranks.size(), 8u);
  for (const RankStatus& r : evals.back().verdict.ranks) {
    EXPECT_NEAR(r.score, 1, 0.1) << "rank " << r.rank;
    EXPECT_FALSE(r.slow);
  }
}

TEST(Judge, ClocksSecondsApartAreCorrected) {
  JobConfig c;
  c.nodes = 3;
  c.per_node = 2;
  c.clock_offset = {0, 3.7, -2.2};
  auto healthy = RunJob(c, 90);
  for (const std::string& o : Others(healthy, [](const Finding&) { return false; })) ADD_FAILURE() << o;
  EXPECT_TRUE(healthy.back().verdict.judged);

  c.injections = {{Injection::kSlowGpu, 4, 2.0, kOnset}};  // on node2, whose clock is 2.2 s behind
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(evals, RankIs(4, Cause::kGpuCompute), "slow GPU behind a clock offset");
  const Finding* f = Last(evals, RankIs(4, Cause::kGpuCompute));
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(f->since, c.start + kOnset, 1.0) << "since is on the reference node's clock";
}

TEST(Judge, NoisyHealthyJobNamesNothing) {
  for (uint64_t seed : {1, 2, 3}) {
    JobConfig c;
    c.seed = seed;
    c.noise = 0.1;
    c.spike_p = 0.003;
    c.spike_s = 0.6;
    auto evals = RunJob(c, 150);
    for (const std::string& o : Others(evals, [](const Finding&) { return false; }))
      ADD_FAILURE() << "seed " << seed << ": " << o;
  }
}

TEST(Judge, SlowGpuIsFoundThroughNoise) {
  JobConfig c;
  c.noise = 0.1;
  c.spike_p = 0.003;
  c.injections = {{Injection::kSlowGpu, 1, 1.6, kOnset}};
  auto evals = RunJob(c, 100);
  ExpectFoundInTime(evals, RankIs(1, Cause::kGpuCompute), "slow GPU under noise");
}

TEST(Judge, SlowdownEndsWithWhatItCost) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 3, 2.0, kOnset, kOnset + 30}};
  JudgeOptions o;
  auto evals = RunJob(c, 120, o);
  std::vector<SlowEvent> events;
  for (const Evaluation& e : evals)
    for (const SlowEvent& ev : e.verdict.events) events.push_back(ev);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].started);
  EXPECT_NE(events[0].line.find("slowdown: rank 3 (node node0) is slow since"), std::string::npos) << events[0].line;
  EXPECT_NE(events[0].line.find("of the job's step time"), std::string::npos) << events[0].line;
  EXPECT_FALSE(events[1].started);
  EXPECT_NE(events[1].line.find("slowdown over: rank 3 (node node0), gpu_compute, after "), std::string::npos)
      << events[1].line;
  // 30 s at about 38%: about 11 s of the job's time.
  EXPECT_NEAR(events[1].cost_s, 30 * 0.38, 4) << events[1].line;
  EXPECT_NEAR(events[1].duration_s, 30, 6);
  double ended_at = -1;
  for (const Evaluation& e : evals)
    for (const SlowEvent& ev : e.verdict.events)
      if (!ev.started) ended_at = e.t;
  EXPECT_LE(ended_at, kOnset + 30 + kBudget);
  EXPECT_TRUE(evals.back().verdict.slow.empty());
}

TEST(Judge, VerdictJsonHasTheFileShape) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 3, 2.0, 30}};
  auto evals = RunJob(c, 60);
  nlohmann::json j = VerdictJson(evals.back().verdict);
  for (const char* key : {"updated", "step_time_s", "baseline_step_time_s", "slow", "ranks"})
    EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_EQ(j["slow"].size(), 1u) << j.dump();
  const nlohmann::json& s = j["slow"][0];
  EXPECT_EQ(s["rank"], 3);
  EXPECT_EQ(s["node"], "node0");
  EXPECT_EQ(s["cause"], "gpu_compute");
  EXPECT_EQ(s["scope"], "rank");
  for (const char* key : {"since", "score", "cost", "detail"}) EXPECT_TRUE(s.contains(key)) << key;
  EXPECT_EQ(j["ranks"].size(), 8u);
}

}  // namespace
}  // namespace xtimer::slowdown

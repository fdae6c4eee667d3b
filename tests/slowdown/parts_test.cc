// The judge's parts alone: reading records (bad input named, never taken), the join of one
// collective (lateness, wait, transfer), clock offsets, and the robust statistics.
#include <gtest/gtest.h>

#include "common/steps/step_json.h"
#include "slowdown/attribution.h"
#include "slowdown/clock_offsets.h"
#include "slowdown/collectives.h"
#include "slowdown/features.h"
#include "slowdown/robust_stats.h"

namespace xtimer::slowdown {
namespace {

const char* kGood =
    R"J({"v": 1, "rank": 3, "world": 8, "node": "host-a", "pid": 1234, "step": 57,
        "t_begin": 1764000000.123456, "t_end": 1764000001.234567,
        "gpu_busy_s": 0.81, "gpu_idle_s": 0.30, "issue_latency_s": 0.00002,
        "kernels": [{"sig": "GEMM bf16 4096x4096x4096", "n": 4, "s": 0.40, "tflops": 312.1}],
        "colls": [{"comm": "9f3a01", "seq": 1234, "op": "AllReduce", "bytes": 67108864,
                   "ranks": 8, "call": 1764000000.9, "start": 1764000000.95, "end": 1764000001.2}],
        "gc_s": 0.0, "data_s": 0.12,
        "samples": [{"frames": "load_batch (train.py:40);main (train.py:88)", "n": 12}]})J";

TEST(StepJson, ReadsTheDocumentedRecord) {
  StepRecord r;
  std::string why;
  ASSERT_TRUE(ParseStepLine(kGood, &r, &why)) << why;
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world, 8);
  EXPECT_EQ(r.node, "host-a");
  EXPECT_EQ(r.step, 57);
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].n, 4u);
  ASSERT_EQ(r.colls.size(), 1u);
  EXPECT_EQ(r.colls[0].seq, 1234);
  EXPECT_EQ(r.colls[0].bytes, 67108864u);
  EXPECT_DOUBLE_EQ(r.colls[0].start, 1764000000.95);
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].n, 12u);
  // And back: the same record.
  StepRecord again;
  ASSERT_TRUE(StepRecordFromJson(StepRecordToJson(r), &again, &why)) << why;
  EXPECT_EQ(StepRecordToJson(again), StepRecordToJson(r));
}

TEST(StepJson, RefusesBadRecordsNamingTheField) {
  struct Case {
    std::string edit_from, edit_to, expect;
  };
  const Case cases[] = {
      {R"("rank": 3)", R"("rank": 3.5)", "\"rank\" is not an integer"},
      {R"("rank": 3)", R"("rank": 9)", "rank 9 is outside [0, world 8)"},
      {R"("world": 8)", R"("world": 0)", "\"world\" is out of range"},
      {R"("t_end": 1764000001.234567)", R"("t_end": "soon")", "\"t_end\" is not a number"},
      {R"("t_end": 1764000001.234567)", R"("t_end": 1764000000.0)", "t_begin/t_end"},
      {R"("seq": 1234)", R"("seq": 1e300)", "\"colls\": \"seq\" is not an integer"},
      {R"("n": 4)", R"("n": -1)", "\"kernels\": \"n\" is out of range"},
      {R"("kernels": [)", R"("kernels": 7, "x": [)", "\"kernels\" is not an array"},
      {R"("v": 1)", R"("v": 2)", "version 2"},
  };
  for (const Case& c : cases) {
    std::string text = kGood;
    size_t at = text.find(c.edit_from);
    ASSERT_NE(at, std::string::npos) << c.edit_from;
    text.replace(at, c.edit_from.size(), c.edit_to);
    StepRecord r;
    std::string why;
    EXPECT_FALSE(ParseStepLine(text, &r, &why)) << c.edit_to;
    EXPECT_NE(why.find(c.expect), std::string::npos) << c.edit_to << ": " << why;
  }
  StepRecord r;
  std::string why;
  EXPECT_FALSE(ParseStepLine(std::string(kGood).substr(0, 100), &r, &why));
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
}

TEST(StepJson, DropsWhatCannotBeUsedAndCleansStrings) {
  StepRecord r;
  std::string why;
  nlohmann::json j = nlohmann::json::parse(kGood);
  j["node"] = std::string("bad\x1b[2Jnode\xff", 12);
  j["colls"].push_back({{"comm", "x"}, {"seq", 1}, {"ranks", 2}, {"start", 5.0}, {"end", 4.0}});  // ends first
  j["kernels"].push_back({{"sig", ""}, {"n", 1}, {"s", 0.1}});                                    // no signature
  ASSERT_TRUE(StepRecordFromJson(j, &r, &why)) << why;
  EXPECT_EQ(r.node, "bad?[2Jnode?");
  EXPECT_EQ(r.colls.size(), 1u);
  EXPECT_EQ(r.kernels.size(), 1u);
}

TEST(Collectives, LatenessWaitAndTransfer) {
  CollectiveTable table;
  ClockOffsets offsets;
  // Three members on one node: arrivals 1.0, 1.1 and 1.6 (the straggler), all end at 1.7.
  std::vector<Collective*> got;
  const double starts[] = {1.0, 1.1, 1.6};
  for (int r = 0; r < 3; ++r) {
    uint32_t index = 0;
    Collective* c = table.Add(7, 42, 0, 1024, 3, CollMember{r, 0, starts[r], 1.7}, 100, &index);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(index, static_cast<uint32_t>(r));
    got.push_back(c);
  }
  uint32_t index = 0;
  EXPECT_EQ(table.Add(7, 42, 0, 1024, 3, CollMember{1, 0, 1.0, 1.7}, 100, &index), nullptr) << "a rank twice";
  table.Finalize(100, 10, &offsets, 0, 1);
  Collective& c = *got[0];
  ASSERT_TRUE(c.final && c.timed);
  EXPECT_NEAR(c.transfer, 0.1, 1e-9) << "from the last arrival to the end, no waiting";
  EXPECT_NEAR(c.members[2].lateness, 0.5, 1e-9) << "after the median arrival";
  EXPECT_NEAR(c.members[2].wait, 0, 1e-9);
  EXPECT_NEAR(c.members[0].wait, 0.6, 1e-9);
  EXPECT_NEAR(c.members[0].lateness, 0, 1e-9);
  for (Collective* p : got) table.Release(p);
  EXPECT_EQ(table.size(), 0u);
}

TEST(Collectives, AMemberMissingIsJudgedAfterTheGrace) {
  CollectiveTable table;
  ClockOffsets offsets;
  uint32_t index = 0;
  Collective* c = table.Add(1, 1, 0, 8, 3, CollMember{0, 0, 1.0, 2.0}, 100, &index);
  table.Add(1, 1, 0, 8, 3, CollMember{1, 0, 1.5, 2.0}, 100, &index);
  table.Finalize(105, 10, &offsets, 0, 1);
  EXPECT_FALSE(c->final);
  table.Finalize(110, 10, &offsets, 0, 1);
  EXPECT_TRUE(c->final);
  EXPECT_TRUE(c->timed);
  EXPECT_NEAR(c->transfer, 0.5, 1e-9);
}

// Real torch's step windows can sit half a step apart on two ranks (DDP's buffer broadcast
// completes on its root without the peer), so one step's summed waits can exceed the step: its
// self time is then zero, never negative (negative, it doubled the other rank's extra time and a
// GC pause was named host).
TEST(Summarize, SelfTimeIsNeverBelowZero) {
  RankSteps waiting, slow;
  waiting.rank = 0, slow.rank = 1;
  for (int i = 0; i < 5; ++i) {
    StepEntry e;
    e.step = i;
    e.t_begin = 10 + i;
    e.t_end = 11 + i;
    e.step_s = 1;
    e.final = true;
    StepEntry w = e, s = e;
    w.wait = 1.35;  // waited for the peer's GC, plus a wait summed in from the step before
    s.wait = 0.1;
    s.gc_s = 0.41;
    waiting.steps.push_back(w);
    slow.steps.push_back(s);
  }
  WindowSpec spec;
  spec.end = 16;
  spec.length = 10;
  JobWindow w = Summarize({&waiting, &slow}, ClockOffsets{}, spec);
  ASSERT_EQ(w.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(w.ranks[0].self_s, 0);
  EXPECT_NEAR(w.ranks[1].self_s, 0.9, 1e-9);
  EXPECT_NEAR(w.ranks[0].wait_s, 1.35, 1e-9) << "the wait itself is kept as measured";
}

TEST(ClockOffsets, LearnedFromCollectiveEndsAndFollowedOutward) {
  ClockOffsets o;
  // Node 1 is 3 s ahead of node 0, node 2 is 2 s behind node 1; node 3 shares nothing.
  for (int i = 0; i < 5; ++i) {
    double t = 100 + i;
    o.AddCollective({{0, t}, {1, t + 3 + (i == 2 ? 0.5 : 0)}});  // one outlier
    o.AddCollective({{1, t + 3}, {2, t + 1}});
  }
  o.Update(0, 4);
  EXPECT_TRUE(o.Known(0));
  EXPECT_NEAR(o.Offset(1), 3, 1e-9);
  EXPECT_NEAR(o.Offset(2), 1, 1e-9);
  EXPECT_FALSE(o.Known(3));
  EXPECT_EQ(o.Offset(3), 0);
  o.Update(2, 4);  // another reference
  EXPECT_NEAR(o.Offset(0), -1, 1e-9);
}

TEST(ClockOffsets, APairNeedsThreeCollectives) {
  ClockOffsets o;
  o.AddCollective({{0, 10}, {1, 12}});
  o.AddCollective({{0, 11}, {1, 13}});
  o.Update(0, 2);
  EXPECT_FALSE(o.Known(1));
  o.AddCollective({{0, 12}, {1, 14}});
  o.Update(0, 2);
  EXPECT_TRUE(o.Known(1));
  EXPECT_NEAR(o.Offset(1), 2, 1e-9);
}

TEST(RobustStats, TrimmedMeanDropsTheLargestTenth) {
  std::vector<double> v = {1, 1, 1, 1, 1, 1, 1, 1, 1, 50};
  EXPECT_DOUBLE_EQ(TrimmedMeanOf(v), 1);
  std::vector<double> every_third = {0, 0, 3, 0, 0, 3, 0, 0, 3, 0};
  EXPECT_NEAR(TrimmedMeanOf(every_third), 2.0 / 3, 1e-12) << "two of the three pauses stay";
  std::vector<double> few = {1, 2, 9};
  EXPECT_DOUBLE_EQ(TrimmedMeanOf(few), 4);
  std::vector<double> none;
  EXPECT_EQ(TrimmedMeanOf(none), 0);
  std::vector<double> even = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(MedianOf(even), 2.5);
}

TEST(RobustStats, OnsetIsWhereTheRunOfHighValuesBegan) {
  std::vector<TimedValue> v;
  for (int i = 0; i < 40; ++i) v.push_back({static_cast<double>(i), i >= 25 ? 1.0 : 0.0});
  v[30].value = v[31].value = 0;  // a dip of two steps inside the run
  v[21].value = 1;                // a blip three steps before it: not part of it
  EXPECT_EQ(OnsetOf(v, 0.5, -1), 25);
  v[21].value = 0;
  v[23].value = 1;  // one step before it: the run is one from there
  EXPECT_EQ(OnsetOf(v, 0.5, -1), 23);
  std::vector<TimedValue> low = {{1, 0}, {2, 0}, {3, 0}};
  EXPECT_EQ(OnsetOf(low, 0.5, -1), -1);
}

TEST(RobustStats, PeerMedianLeavesTheRankOut) {
  PeerMedian m;
  m.Add(0, 1);
  m.Add(1, 1);
  m.Add(2, 10);
  m.Done();
  EXPECT_EQ(m.Of(2), 1);
  EXPECT_EQ(m.Of(0), 5.5);
}

}  // namespace
}  // namespace xtimer::slowdown

namespace xtimer::slowdown {
namespace {

TEST(SampleDetail, NamesWhatTheStragglerDoesMoreThanItsPeers) {
  SampleCounts own, peers;
  own.by_frame = {{"train_step (train.py:61)", 60}, {"slow_fn (train.py:40)", 40}};
  own.total = 100;
  peers.by_frame = {{"train_step (train.py:61)", 200}};
  peers.total = 200;
  EXPECT_EQ(SampleDetail(own, peers),
            "slow_fn (train.py:40) in 40% of its main thread's 100 Python samples, 0% of its peers'");
  EXPECT_EQ(SampleDetail(own, {}),
            "train_step (train.py:61) in 60% of its main thread's 100 Python samples (no peer samples to compare)");
  EXPECT_EQ(SampleDetail({}, peers), "");
}

// Every rank pauses for a checkpoint at t = 1 (a step of 0.8 s); the straggler's samples begin
// before it, its peer's after it. Counted over the span both cover, the checkpoint weighs on
// neither side, and the function the straggler spends its own time in is named.
TEST(SampleDetail, ComparesOnlyTheSpanBothSampled) {
  auto step = [](double begin, double len, std::vector<std::pair<std::string, uint64_t>> frames) {
    return SampledStep{begin, begin + len, std::move(frames)};
  };
  std::map<int32_t, std::vector<SampledStep>> all;
  all[5].push_back(step(0.2, 0.8, {{"save_checkpoint (train.py:99)", 12}}));
  for (int i = 0; i < 5; ++i) all[5].push_back(step(1.0 + 0.2 * i, 0.2, {{"slow_fn (train.py:40)", 1}}));
  for (int i = 1; i < 5; ++i) all[4].push_back(step(1.0 + 0.2 * i, 0.2, {{"train_step (train.py:61)", 1}}));
  SampleCounts own, peers;
  for (double long_step : {0.0, 0.4}) {
    SamplesToCompare(all, 5, long_step, &own, &peers);
    EXPECT_EQ(own.by_frame.count("save_checkpoint (train.py:99)"), 0u);
    EXPECT_EQ(SampleDetail(own, peers).rfind("slow_fn (train.py:40) in 100% of its main thread's 4 ", 0), 0u)
        << SampleDetail(own, peers);
  }
  // No peer samples yet: its own, but not the checkpoint's long step; all when only long ones.
  all.erase(4);
  SamplesToCompare(all, 5, 0.4, &own, &peers);
  EXPECT_EQ(own.total, 5u);
  EXPECT_EQ(peers.total, 0u);
  SamplesToCompare(all, 5, 0, &own, &peers);
  EXPECT_EQ(own.total, 17u);
  all[5].resize(1);
  SamplesToCompare(all, 5, 0.4, &own, &peers);
  EXPECT_EQ(own.total, 12u);
}

}  // namespace
}  // namespace xtimer::slowdown

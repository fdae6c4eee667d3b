// The rank-side step logic on synthetic input: finding the step in a stream of collectives
// (preload/step_detector.h) and placing late, out-of-order facts into step windows
// (preload/step_book.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "preload/steps/step_book.h"
#include "preload/steps/step_detector.h"

namespace xtimer {
namespace {

constexpr uint64_t kMs = 1000000;

// Feeds a step's collectives: keys[i] at t + gaps[i]; per-communicator sequence numbers in
// `seq` (by comm). Returns the step numbers of the boundaries seen.
struct Feeder {
  StepDetector d;
  uint64_t t = 1000 * kMs;
  std::vector<uint64_t> seq = std::vector<uint64_t>(8, 0);
  std::vector<uint64_t> boundaries;
  std::vector<uint64_t> boundary_times;

  void Call(uint32_t key, int comm, uint64_t gap_ns) {
    t += gap_ns;
    uint64_t step = 0;
    if (d.Feed(key, t, ++seq[static_cast<size_t>(comm)], comm, &step)) {
      boundaries.push_back(step);
      boundary_times.push_back(t);
    }
  }
  // One step: a long pause (data, forward), then the collectives 1 ms apart.
  void Step(const std::vector<uint32_t>& keys, const std::vector<int>& comms, uint64_t pause_ns = 80 * kMs) {
    for (size_t i = 0; i < keys.size(); ++i) Call(keys[i], comms[i], i == 0 ? pause_ns : kMs);
  }
};

TEST(StepDetector, OneCollectivePerStep) {
  Feeder f;
  for (int s = 0; s < 40; ++s) f.Step({7}, {0});
  ASSERT_TRUE(f.d.locked());
  EXPECT_EQ(f.d.period(), 1u);
  // Locked once 32 calls repeated; each later call begins a step, numbered by its place.
  ASSERT_EQ(f.boundaries.size(), 40u - StepDetector::kMinHistory);
  EXPECT_EQ(f.boundaries.front(), StepDetector::kMinHistory);  // the 33rd call is step 32
  for (size_t i = 1; i < f.boundaries.size(); ++i) EXPECT_EQ(f.boundaries[i], f.boundaries[i - 1] + 1);
}

TEST(StepDetector, AnchorIsTheCallAfterTheLongestPause) {
  Feeder f;
  // Three all-reduces of different sizes per step, then a separate comm's all-gather. The pause
  // is before the all-gather this time: it is the anchor.
  for (int s = 0; s < 20; ++s) {
    f.Call(1, 0, 2 * kMs);
    f.Call(2, 0, 2 * kMs);
    f.Call(3, 0, 2 * kMs);
    f.Call(4, 1, 90 * kMs);
  }
  ASSERT_TRUE(f.d.locked());
  EXPECT_EQ(f.d.period(), 4u);
  EXPECT_EQ(f.d.anchor(), 4u);
  ASSERT_GE(f.boundaries.size(), 5u);
  // Boundaries 92 ms + ... apart: one per step, each at an all-gather.
  for (size_t i = 1; i < f.boundary_times.size(); ++i)
    EXPECT_EQ(f.boundary_times[i] - f.boundary_times[i - 1], 96 * kMs);
  // Comm 1 has one collective per step: its n-th call is step n-1.
  EXPECT_EQ(f.boundaries.back(), 19u);
}

TEST(StepDetector, RepeatedClassesWithinAStep) {
  Feeder f;
  // FSDP-like: the same all-gather 6 times, then reduce-scatters, then a small all-reduce.
  std::vector<uint32_t> keys = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3};
  std::vector<int> comms(keys.size(), 0);
  for (int s = 0; s < 12; ++s) f.Step(keys, comms);
  ASSERT_TRUE(f.d.locked());
  EXPECT_EQ(f.d.period(), keys.size());
  // The call after the pause is an all-gather, six per period; the anchor is the one class that
  // occurs once, the all-reduce.
  EXPECT_EQ(f.d.anchor(), 3u);
  ASSERT_GE(f.boundaries.size(), 3u);
  for (size_t i = 1; i < f.boundary_times.size(); ++i)
    EXPECT_EQ(f.boundary_times[i] - f.boundary_times[i - 1], 80 * kMs + 12 * kMs);
}

TEST(StepDetector, AnExtraCollectiveDoesNotShiftTheSteps) {
  Feeder f;
  for (int s = 0; s < 15; ++s) f.Step({1, 2, 3}, {0, 0, 0});
  ASSERT_TRUE(f.d.locked());
  const size_t before = f.boundaries.size();
  // A checkpoint step: a barrier all-reduce of another size in the middle.
  f.Step({1, 9, 2, 3}, {0, 0, 0, 0});
  for (int s = 0; s < 5; ++s) f.Step({1, 2, 3}, {0, 0, 0});
  EXPECT_EQ(f.boundaries.size(), before + 6);
  EXPECT_TRUE(f.d.locked());
  EXPECT_EQ(f.d.relearned(), 0u);
  for (size_t i = 1; i < f.boundaries.size(); ++i) EXPECT_EQ(f.boundaries[i], f.boundaries[i - 1] + 1);
}

TEST(StepDetector, StartsOverWhenThePatternChanges) {
  Feeder f;
  for (int s = 0; s < 15; ++s) f.Step({1, 2, 3}, {0, 0, 0});
  ASSERT_TRUE(f.d.locked());
  EXPECT_EQ(f.d.anchor(), 1u);
  const uint64_t last = f.boundaries.back();
  // Evaluation: other collectives entirely.
  for (int s = 0; s < 30; ++s) f.Step({5, 6}, {0, 0});
  EXPECT_EQ(f.d.relearned(), 1u);
  ASSERT_TRUE(f.d.locked());
  EXPECT_EQ(f.d.period(), 2u);
  EXPECT_EQ(f.d.anchor(), 5u);
  EXPECT_GT(f.boundaries.back(), last);
  for (size_t i = 1; i < f.boundaries.size(); ++i) EXPECT_GT(f.boundaries[i], f.boundaries[i - 1]);
}

TEST(StepDetector, NoPeriodNoSteps) {
  Feeder f;
  uint32_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    x = x * 1103515245u + 12345u;
    f.Call((x >> 16) % 50, 0, kMs);
  }
  EXPECT_FALSE(f.d.locked());
  EXPECT_TRUE(f.boundaries.empty());
}

TEST(StepBook, BusyTimeIsTheUnionOfIntervalsInTheWindow) {
  StepBook b;
  b.Begin(5, 100);
  b.Begin(6, 200);
  b.Begin(7, 300);
  b.AddInterval(110, 150);
  b.AddInterval(140, 160);  // overlaps: union 110..160 = 50
  b.AddInterval(190, 230);  // split: 10 in step 5, 30 in step 6
  b.AddInterval(250, 260);
  b.AddInterval(50, 60);  // before any window
  EXPECT_EQ(b.late(), 1u);
  StepFacts f;
  ASSERT_FALSE(b.TakeFinished(199, &f));  // not everything up to the end of step 5 is in
  ASSERT_TRUE(b.TakeFinished(200, &f));
  EXPECT_EQ(f.step, 5u);
  EXPECT_EQ(f.begin_ns, 100u);
  EXPECT_EQ(f.end_ns, 200u);
  EXPECT_EQ(f.busy_ns, 60u);
  ASSERT_TRUE(b.TakeFinished(1000, &f));
  EXPECT_EQ(f.step, 6u);
  EXPECT_EQ(f.busy_ns, 40u);
  EXPECT_FALSE(b.TakeFinished(UINT64_MAX, &f));  // step 7 has no end yet
}

TEST(StepBook, FactsGoToTheirOwnStep) {
  StepBook b;
  b.Begin(1, 1000);
  b.Begin(2, 2000);
  // Arriving late and out of order.
  b.AddKernel(3, 1500, 100);
  b.AddKernel(3, 1600, 50);
  b.AddKernel(4, 2100, 70);  // started in step 2
  StepColl c;
  c.class_id = 9;
  c.call_ns = 1900;
  c.start_ns = 2050;  // its GPU part runs in step 2; it belongs to the step that called it
  c.end_ns = 2300;
  b.AddColl(c);
  b.AddIssueLatency(1100, 1110);
  b.AddIssueLatency(1200, 1230);
  b.AddIssueLatency(1300, 1320);
  b.AddSpan(SpanKind::kGc, 1900, 2100);  // 100 in each
  b.AddSpan(SpanKind::kData, 1200, 1300);
  b.AddSample(1500, "load (a.py:1);main (a.py:9)");
  b.AddSample(1600, "load (a.py:1);main (a.py:9)");
  b.AddSample(1700, "step (a.py:5);main (a.py:10)");
  b.Begin(3, 3000);
  StepFacts f;
  ASSERT_TRUE(b.TakeFinished(5000, &f));
  EXPECT_EQ(f.kernels.size(), 1u);
  EXPECT_EQ(f.kernels[3].n, 2u);
  EXPECT_EQ(f.kernels[3].ns, 150u);
  ASSERT_EQ(f.colls.size(), 1u);
  EXPECT_EQ(f.colls[0].class_id, 9u);
  EXPECT_EQ(f.issue_latency_ns, 20);
  EXPECT_EQ(f.gc_ns, 100u);
  EXPECT_EQ(f.data_ns, 100u);
  ASSERT_EQ(f.samples.size(), 2u);
  EXPECT_EQ(f.samples[0].first, "load (a.py:1);main (a.py:9)");
  EXPECT_EQ(f.samples[0].second, 2u);
  ASSERT_TRUE(b.TakeFinished(5000, &f));
  EXPECT_EQ(f.step, 2u);
  EXPECT_EQ(f.kernels.size(), 1u);
  EXPECT_EQ(f.kernels[4].ns, 70u);
  EXPECT_TRUE(f.colls.empty());
  EXPECT_EQ(f.gc_ns, 100u);
  EXPECT_EQ(f.issue_latency_ns, -1);  // nothing timed was issued in step 2
}

TEST(StepBook, BoundedWhenStepsNeverComplete) {
  StepBook b;
  for (uint64_t s = 0; s < 100; ++s) b.Begin(s, 1000 * (s + 1));
  StepFacts f;
  size_t out = 0;
  while (b.TakeFinished(0, &f)) ++out;  // nothing complete, but the oldest were pushed out
  EXPECT_EQ(out, 100u - StepBook::kMaxOpen);
  for (uint64_t s = 0; s < StepBook::kMaxColls + 10; ++s) {
    StepColl c;
    c.call_ns = 1000 * 99 + s;
    b.AddColl(c);
  }
  size_t left = 0;
  while (b.TakeEnded(&f)) {
    ++left;
    EXPECT_LE(f.colls.size(), StepBook::kMaxColls);
  }
  EXPECT_EQ(left, StepBook::kMaxOpen - 1);  // the last step has no end
}

}  // namespace
}  // namespace xtimer

// What the judge keeps of each rank's steps, and what a window of them comes to.
//
// A StepEntry is one record after the join: its own numbers, its kernels by signature id, and its
// collectives (collectives.h); it is final once all its collectives are, and then has its
// lateness, wait and transfer (sums over its timed collectives). Summarize() takes each rank's
// final, non-warm-up steps whose end (on the reference clock) lies in (end - window, end], at
// least `min_steps` of them (older ones when the window holds fewer), and gives per rank the
// median step time and the upper-trimmed means (robust_stats.h) of its parts; per communicator
// and (op, bytes) the median transfer time of its collectives in those steps; and for the job
// the medians over ranks. Pure functions over the entries; the judge owns them.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "common/steps/step_record.h"
#include "slowdown/collectives.h"

namespace xtimer::slowdown {

struct SigTime {
  uint32_t sig = 0;
  double n = 0;  // launches
  double s = 0;  // seconds
};

struct StepEntry {
  int64_t step = 0;
  double t_begin = 0, t_end = 0;  // raw (the rank's clock)
  double step_s = 0, idle_s = 0, gc_s = 0, data_s = 0, compute_s = 0;
  std::vector<SigTime> kernels;
  std::vector<std::pair<Collective*, uint32_t>> colls;  // and the member index
  std::vector<StackSample> samples;
  bool warmup = false;
  bool final = false;
  double lateness = 0, wait = 0, transfer = 0;  // once final
};

struct RankSteps {
  int32_t rank = 0;
  int32_t world = 0;
  int node = 0;
  int64_t pid = 0;
  double last_arrival = 0;  // judge clock
  int64_t records = 0;      // since it (re)started
  int64_t last_step = INT64_MIN;
  double last_t_end = 0;
  std::deque<StepEntry> steps;  // in arrival order
};

// Sets lateness, wait and transfer once every collective of the step is final; true if final.
bool FinalizeStep(StepEntry* e);

struct RankWindow {
  int32_t rank = 0;
  int node = 0;
  int steps = 0;
  double first = 0, last = 0;  // begin of its first window step, end of its last (reference clock)
  double step_s = 0;           // median
  double self_s = 0;           // step - wait: its own work per step
  double lateness_s = 0, wait_s = 0, transfer_s = 0, compute_s = 0, gc_s = 0, data_s = 0, idle_s = 0;
  double late_share = 0;      // of its window steps, those it reached late by kLateStep of its step time or more
  std::vector<SigTime> sigs;  // totals over the window
};

struct CommWindow {
  uint32_t comm = 0, op = 0;
  uint64_t bytes = 0;
  int32_t expected = 0;
  std::vector<int32_t> ranks;  // members (of the fullest collective), ascending
  std::vector<int> nodes;      // their nodes, ascending, unique
  int count = 0;               // timed collectives in the window
  double transfer_s = 0;       // median
  double mean_transfer_s = 0;  // upper-trimmed mean (as the ranks' own work: what the window's slow part adds)
  double per_step = 0;         // collectives per step of a member
};

struct JobWindow {
  double end = 0;                                                                                  // reference clock
  double step_s = 0, self_s = 0, compute_s = 0, transfer_s = 0, gc_s = 0, data_s = 0, idle_s = 0;  // medians
  std::vector<RankWindow> ranks;  // judged ranks, by rank
  std::vector<CommWindow> comms;
};

// A step whose lateness is at least this fraction of the rank's median step time counts as late.
inline constexpr double kLateStep = 0.05;

struct WindowSpec {
  double end = 0;  // reference clock
  double length = 5;
  int min_steps = 3;
  uint64_t stamp = 0;  // a new number per call (marks collectives counted)
};

// `offsets` put each rank's raw times on the reference clock.
JobWindow Summarize(const std::vector<const RankSteps*>& ranks, const ClockOffsets& offsets, const WindowSpec& spec);

// The window steps of one rank, newest last (what Summarize uses for it).
std::vector<const StepEntry*> WindowSteps(const RankSteps& r, double offset, const WindowSpec& spec);

}  // namespace xtimer::slowdown

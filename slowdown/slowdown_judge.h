// The slowdown judge: step records of every rank in, a verdict out (slowdown_verdict.h). The node agent's
// embedded collector, xtimer_collector and xtimer_slowdown (offline, from files) all run this one
// class. Pure computation: no clock, no file, no log; the caller says what time it is.
//
// What it does, per evaluation (README.md has the reasons):
//   1. Joins every collective across its members by (communicator, sequence number), once all
//      members reported it (or after a grace period), with each node's clock offset removed
//      (clock_offsets.h). A member's arrival is its kernel's start; the collective's transfer
//      time runs from the last member's arrival to the end. A rank's lateness is how long after
//      the median member it arrived, its wait how long before the last.
//   2. Takes each rank's steps of the window (the last `window_s` seconds up to the point every
//      live rank has reported, at least `min_steps` steps) and compares the rank with its peers
//      (relative: own work per step, waiting excluded) and with its own best (individual), and
//      every communicator's transfer time with its best and with its siblings'.
//   3. Attributes (attribution.h): a late rank whose same kernel signatures are slower is
//      gpu_compute; whose GC or DataLoader time covers its extra time is python_gc or
//      data_loading; otherwise host (named with its Python samples when it has some). Slower
//      transfer is network, put on the one node (or link) the slowed communicators share. A
//      slowdown of every rank with no one to blame is scope job, with its dominant change.
//   4. Keeps a slowdown only after `start_evals` evaluations in a row and ends it after
//      `end_evals` without it (episodes.h); `since` is where its run of slow steps began.
// Never does a collective's duration score a rank: a straggler's collectives are the shortest.
//
// Not thread-safe: one caller at a time (the collector holds a lock around it).
#pragma once

#include <cstdint>
#include <memory>

#include "common/env.h"
#include "common/steps/step_record.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

struct JudgeOptions {
  // The XTIMER_SLOW_* settings start from the table's defaults (common/env.cc); FromEnv reads them.
  double window_s = env::DefaultDouble("XTIMER_SLOW_WINDOW");
  double interval_s = env::DefaultDouble("XTIMER_SLOW_INTERVAL");  // how often the callers evaluate
  double threshold = env::DefaultDouble("XTIMER_SLOW_THRESHOLD");  // a score below it is slow
  double baseline_s = env::DefaultDouble("XTIMER_SLOW_BASELINE");  // how far back "its best" looks
  // Seconds of Python samples asked of a host straggler; 0 = never.
  double sample_s = env::DefaultDouble("XTIMER_SLOW_SAMPLE");
  double sample_hz = 50;     // a second of samples names a function (the verdict comes within seconds)
  int min_steps = 3;         // a rank with fewer steps in the window is not judged
  int warmup_steps = 5;      // each rank's first steps (start-up) are not judged
  int start_evals = 2;       // evaluations in a row before a slowdown is reported
  int end_evals = 2;         // evaluations in a row without it before it ends
  double stale_s = 20;       // a rank silent this long (judge clock) no longer holds the window back
  double join_grace_s = 10;  // a collective missing members is judged with those present after this
  double keep_s = 60;        // steps kept (for `since` and the window)
  size_t max_steps_per_rank = 4096;

  // The XTIMER_SLOW_* settings (docs/config.md); a bad value warns once and keeps the default.
  static JudgeOptions FromEnv();
};

class Judge {
 public:
  explicit Judge(JudgeOptions options = {});
  ~Judge();
  Judge(const Judge&) = delete;
  Judge& operator=(const Judge&) = delete;

  // One checked record (CheckStepRecord), which came at `arrival_s` (the judge's clock: unix s).
  // A record of a rank whose pid changed starts that rank afresh (a restarted process).
  void Add(StepRecord record, double arrival_s);
  // Evaluates at `now_s` (unix s; also the verdict's `updated`).
  Verdict Evaluate(double now_s);

  const JudgeOptions& options() const;
  size_t ranks() const;  // ranks that sent records

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xtimer::slowdown

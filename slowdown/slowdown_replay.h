// The slowdown judge over recorded steps (xtimer_slowdown): the records of every rank put in the
// order they ended (each node's clock offset, learned from its collectives' end times, taken out
// first, so a node whose clock is seconds ahead does not arrive seconds late), handed to the same
// judge the agent and the collector run, with an evaluation every XTIMER_SLOW_INTERVAL seconds of
// the job's time. Keeps what the picture and the file need: every evaluation's step time and
// score per rank, and every slowdown seen (an episode) with its start, end and cost.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/steps/step_record.h"
#include "slowdown/slowdown_judge.h"

namespace xtimer {

struct SlowdownEpisode {
  slowdown::Finding finding;    // as last seen
  double since = 0, until = 0;  // the job's clock; `until`: its end, or the last evaluation
  double cost_s = 0;            // seconds of the job's time it cost
  bool ended = false;
};

struct SlowdownReplay {
  std::vector<double> t;         // each judged evaluation's window end (the job's clock)
  std::vector<double> job_step;  // the job's step time at each
  std::vector<double> baseline;  // its best so far (0 before there is one)
  struct Series {
    std::vector<double> step, score;  // per evaluation; NaN where the rank was not judged
  };
  std::map<int32_t, Series> ranks;
  std::map<int32_t, std::string> node_of;
  std::vector<SlowdownEpisode> episodes;  // in the order they started
  std::vector<std::string> lines;         // the start and end log lines, in order
  std::vector<std::string> clock_lines;   // clocks over an hour apart, one line each (see below)
  slowdown::Verdict last;                 // the last evaluation's verdict
  size_t records = 0;
  double start = 0;  // the first record's start (the job's clock)
};

// Clocks: a rank whose clock is over kClockWarnSeconds off its node's other ranks', or a node's
// off the lowest rank's node's (by the collectives they share), is named in `clock_lines` and its
// times moved onto that clock before anything else, so that it neither leaves the job's time nor
// moves the others' alignment; smaller offsets are taken out per node as before. Empty time (no
// rank held by the judge) is skipped, not evaluated every interval.
inline constexpr double kClockWarnSeconds = 3600;

// Consumes `records`. `progress` (may be empty) gets (records done, records in all) now and then.
SlowdownReplay ReplaySlowdown(std::vector<slowdown::StepRecord> records, const slowdown::JudgeOptions& options,
                              const std::function<void(size_t, size_t)>& progress = {});

}  // namespace xtimer

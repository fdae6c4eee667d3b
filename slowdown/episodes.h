// Hysteresis: which candidates (attribution.h) are slowdowns. A key (a rank, a node, a link, the
// job) starts after `start_evals` evaluations in a row with a strong candidate, with the `since`
// its candidate had then; it stays while any candidate (strong or weak) for it comes, its cause,
// score, cost and detail following the newest; it ends after `end_evals` evaluations in a row
// without one (it is still listed until then, with its last numbers). Each start and end is an
// event with its log line; an end says how long it lasted and what it cost (its cost integrated
// over the evaluations, in seconds of the job's time). Durations are on the job's own clock (the
// reference node's, as `since`): each evaluation's window end. Not thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "slowdown/attribution.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

class Episodes {
 public:
  Episodes(int start_evals, int end_evals) : start_evals_(start_evals), end_evals_(end_evals) {}
  // `candidates` have their `since`; `window_end` is the end of the window they come from (the
  // reference clock). Returns the active slowdowns (largest cost first); appends the starts and
  // ends to *events.
  std::vector<Finding> Update(const std::vector<Candidate>& candidates, double window_end,
                              std::vector<SlowEvent>* events);

 private:
  struct State {
    Finding last;
    int streak = 0;
    bool active = false;
    int misses = 0;
    double last_seen = 0;
    double cost_s = 0;
  };
  int start_evals_, end_evals_;
  std::map<std::string, State> states_;
};

// The log lines (one per event): "slowdown: rank 3 (node host-b) is slow since ...: gpu_compute,
// ...; it costs 21% of the job's step time" and "slowdown over: rank 3 (node host-b), gpu_compute,
// after 42 s; it cost about 8.8 s of the job's time (21% of its step time)".
std::string StartLine(const Finding& f);
std::string EndLine(const Finding& f, double duration_s, double cost_s);
// "rank 3 (node host-b)", "node host-b (ranks 4-7)", "link host-a - host-b", "the job"
std::string Who(const Finding& f);

}  // namespace xtimer::slowdown

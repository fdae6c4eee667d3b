// What the judge says after an evaluation: the job's step time against its best, the slowdowns
// going on (each with who, why, since when, how much slower and what it costs), every rank's
// step time and score, the slowdowns that started or ended at this evaluation, and the ranks to
// ask for Python stack samples. slowdown.json, /metrics, the status page and the log lines are
// all made from it (slowdown_verdict_json.h, slowdown_metrics.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xtimer::slowdown {

enum class Cause { kGpuCompute, kNetwork, kHost, kPythonGc, kDataLoading };
enum class Scope { kRank, kNode, kLink, kJob };
inline constexpr int kCauseCount = 5;

// "gpu_compute", "network", "host", "python_gc", "data_loading"; "rank", "node", "link", "job".
const char* CauseName(Cause c);
const char* ScopeName(Scope s);

struct Finding {
  Scope scope = Scope::kRank;
  Cause cause = Cause::kHost;
  int32_t rank = -1;           // scope rank: the rank; -1 otherwise (a node, a link and the job name no rank)
  std::string node;            // the rank's node, the node, or a link's first node; "" for the job
  std::string peer;            // a link's other node
  std::vector<int32_t> ranks;  // the ranks it concerns: the rank, the node's, the link's two nodes'; none for the job
  double since = 0;            // unix s (the reference node's clock): the start of the first slow step
  double score = 1;            // its rate against its peers' (or, for the job, its best): below 1 is slower
  double cost = 0;             // fraction of the job's step time its extra time accounts for
  std::string detail;          // one line
  std::string key;  // identifies it across evaluations, with its cause: "rank 3 host", "node host-b network",
                    // "job host" (a node slow for another cause is another slowdown)
};

struct RankStatus {
  int32_t rank = 0;
  std::string node;
  double step_time_s = 0;      // median over the window
  double score = 1;            // own rate / the peers' (own work per step, waiting for others excluded)
  double individual = 1;       // own rate / its own best in the baseline period
  int steps = 0;               // steps in the window
  bool slow = false;           // some active finding concerns it
  Cause cause = Cause::kHost;  // when slow: the first finding's cause
};

// A slowdown that started (it has been seen in enough evaluations) or ended.
struct SlowEvent {
  bool started = true;
  Finding finding;        // as at the start, or as last seen
  double duration_s = 0;  // ended: from `since` to the end
  double cost_s = 0;      // ended: the job's time it cost, in seconds (cost integrated over time)
  std::string line;       // the log line
};

struct SampleRequest {
  int32_t rank = 0;
  double seconds = 10;
  double hz = 50;
};

struct Verdict {
  double updated = 0;               // unix s of the evaluation
  bool judged = false;              // enough steps of enough ranks to judge; false: step times are unknown
  double step_time_s = 0;           // the job's step time in the window (median over ranks)
  double baseline_step_time_s = 0;  // its best over the baseline period; 0 before there is one
  double window_end = 0;            // unix s (reference clock): the end of the window judged
  std::vector<Finding> slow;        // active slowdowns, largest cost first; empty when healthy
  std::vector<RankStatus> ranks;    // by rank
  std::vector<SlowEvent> events;    // started or ended at this evaluation
  std::vector<SampleRequest> samples;
};

}  // namespace xtimer::slowdown

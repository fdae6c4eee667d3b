// From one window (features.h) to the slowdowns it shows, each with its cause, before hysteresis.
// Pure; the rules, in the order they are applied (README.md has the reasons):
//
// Network. A communicator's (op, bytes) collectives are slowed when their median transfer time is
// at least 1/threshold times its reference, the lower of its own best (baseline period) and the
// median of its siblings (other communicators with the same op, bytes and member count), and
// they add at least 1% of the step; unslowed when within half that ratio. A rank's network extra
// is the sum of its slowed communicators' extra time per step. The slowdown is put on:
//   - the one node in every slowed communicator and in no unslowed one that spans nodes;
//   - else the one pair of nodes in every slowed communicator that no unslowed one holds both of
//     (a link);
//   - else the job (every node could be the one).
// Ranks. Each judged rank's own work per step (step time minus its wait at collectives) against
// the median of its peers': the extra, less what its network extra explains, is the rank's cost
// in the step; it must also arrive late by half of it on average, and late in at least a quarter
// of its steps (a few long steps now and then are noise, not a straggler). The extra is put on
// the largest of: slower kernels (per call, same signature, against the peers' median), GC time,
// DataLoader time, when it covers half of it; else host, named by the innermost function whose
// share of its Python samples most exceeds its share of the peers' samples.
// When every judged rank of a node (two or more, the job having several nodes) is slow with the
// same cause, the node is named once instead.
// Job. The step time against the job's best, less the largest extra already explained, names the
// job with the part that grew most (kernels, transfer, GC, DataLoader, or GPU idle: host).
//
// A candidate is `strong` when its cost reaches 1 - threshold (and, for the job and the network,
// its ratio passes the threshold): enough to start a slowdown; weaker ones down to half that cost
// only keep one going.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "slowdown/features.h"
#include "slowdown/names.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

using CommKey = std::tuple<uint32_t, uint32_t, uint64_t>;  // communicator, op, bytes

struct JobBest {
  double step_s = 0, compute_s = 0, transfer_s = 0, gc_s = 0, data_s = 0, idle_s = 0;
};

// A rank's main-thread samples, counted by innermost frame.
struct SampleCounts {
  std::map<std::string, uint64_t> by_frame;
  uint64_t total = 0;
};

// One step's main-thread samples of one rank (reference clock), by innermost frame.
struct SampledStep {
  double begin = 0, end = 0;
  std::vector<std::pair<std::string, uint64_t>> frames;
};

// What a host straggler's samples are compared with: its own and its peers' (pooled) samples of
// the steps in the span both cover (a step counts when its middle is in it), so that something
// every rank does at one moment (a checkpoint, an evaluation) weighs alike on both sides however
// their sampling periods fall. Without peer samples over a common span: all of its own, no peers'.
// Steps longer than `long_step_s` (when > 0) are left out on both sides: a straggler's extra
// time recurs in its ordinary steps, while a pause of every rank (a checkpoint) makes one step
// far longer than the others and, in the first second of samples, would outweigh it. When that
// leaves nothing, they count after all.
void SamplesToCompare(const std::map<int32_t, std::vector<SampledStep>>& all, int32_t rank, double long_step_s,
                      SampleCounts* own, SampleCounts* peers);

struct AttributionContext {
  double threshold = 0.85;
  const Names* nodes = nullptr;
  const Names* sigs = nullptr;
  const Names* comms = nullptr;
  const Names* ops = nullptr;
  const JobBest* job_best = nullptr;                     // nullptr: not enough history yet
  const std::map<CommKey, double>* comm_best = nullptr;  // best median transfer
  const std::map<int32_t, std::vector<SampledStep>>* samples = nullptr;
  std::map<int, std::vector<int32_t>> node_ranks;  // every rank seen, by node
};

// Which of a rank's per-step series shows the slowdown (for `since`).
enum class Series { kLateness, kTransfer, kStep };

struct Candidate {
  Finding finding;  // all but `since`
  bool strong = false;
  double extra_s = 0;  // the job's step time it accounts for
  int32_t series_rank = -1;
  Series series = Series::kLateness;
  double level = 0;  // a step of that series at or above it is slow
};

std::vector<Candidate> Attribute(const JobWindow& w, const AttributionContext& ctx);

// The host detail from samples: the frame most over-represented in `own` against `peers` (their
// pooled counts; may be empty), e.g. "slow_fn (train.py:40) in 33% of its main thread's samples,
// 0% of its peers'". Empty when `own` has none.
std::string SampleDetail(const SampleCounts& own, const SampleCounts& peers);

// "12.3 ms", "1.20 s"
std::string Seconds(double s);

}  // namespace xtimer::slowdown

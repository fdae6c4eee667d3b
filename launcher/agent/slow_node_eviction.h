// xtimer_run --evict-slow-nodes: when the slowdown judge's verdicts name this node slow for a
// cause that stays with the node, for long enough and at a high enough cost, the node leaves the
// run (launcher/run/README.md, "Slow nodes"). The rule is pure: the last verdicts, this node's
// name and the thresholds in, "evict, with the finding and a reason" or "not" out.
//
// A cause evicts only when it would not follow the job to another node: gpu_compute (a rank's or
// the node's GPU), and network when the judge pins it on this one node's links (scope node).
// Host, GC and data-loading slowdowns, a link between two nodes and the whole job's slowdown are
// never acted on. Neither is a slowdown that the verdict puts on more than half of the job's
// nodes at once: that is the job being slow, not one node.
#pragma once

#include <deque>
#include <string>

#include "collector.pb.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer {

struct EvictionThresholds {
  double min_cost = 0.2;  // --evict-slow-cost: the finding's share of the job's step time, at least
  double sustain_s = 10;  // --evict-slow-after: named in every verdict for at least this long
};

struct EvictionCall {
  bool evict = false;
  slowdown::Finding finding;  // the newest verdict's finding that evicts
  std::string key;            // what identifies it across verdicts (its key, or one made alike)
  double named_for_s = 0;     // how long it has been named without a break
  std::string reason;         // one line: why (evict) or why not (when a finding names the node)
  // Not evict, for a reason that will not pass with time (the cause, the job slow as a whole):
  // a key to say it once by; "" otherwise.
  std::string say_once;
};

// Whether a finding's cause and scope stay with `node` (the judge's node name).
bool EvictingFinding(const slowdown::Finding& f, const std::string& node);

// The verdicts in order, oldest first (at most a few minutes of them). Evict when the newest
// judged verdict has an evicting finding about `node` costing at least `min_cost`, the same
// finding (its key; made from its scope, rank or node and cause when the verdict came without
// keys, over the gRPC link) is in every judged verdict back to one at least `sustain_s` older, and the
// evicting findings of the newest verdict name at most half of the job's `job_nodes` nodes (the
// round's; an agent's verdict lists its own node's ranks only).
EvictionCall JudgeEviction(const std::deque<slowdown::Verdict>& history, const std::string& node, int job_nodes,
                           const EvictionThresholds& t);

// The eviction as the collector is told it (v1::NodeEviction): `record`, the JSON object xtimer_run
// stores under the etcd key evicted/<addr> ({"node", "name", "round", "group_rank", "cause",
// "scope", "cost", "since", "named_for_s", "detail", "spares", "time"}; launcher/run/README.md),
// and `reason`, the eviction's log line. False with *error (one line) when `record` is not such an
// object: not JSON, a member of the wrong type, "name" or "cause" missing. Members not named
// here are ignored; strings are kept whole (the collector caps what it keeps).
bool EvictionOfRecord(const std::string& record, const std::string& reason, v1::NodeEviction* out, std::string* error);

// Keeps the verdicts the rule needs: those of the last `sustain_s` + 30 s (at most 512).
void KeepVerdict(std::deque<slowdown::Verdict>* history, const slowdown::Verdict& v, const EvictionThresholds& t);

}  // namespace xtimer

// Judging the measurements of a network check: which nodes are ok, stragglers, faulty or
// missing, and which links are bad. Pure logic over numbers; no sockets, no clocks.
//
// The rules (README.md explains them with examples):
//  - A test of a pair is "bad" when it failed (error, timeout), when its time is over
//    straggler_factor x the reference time, or when its bandwidth (the slower direction) is under
//    min_bandwidth_mbps. Otherwise it is "good".
//  - The reference time is the median, over the tested nodes, of each node's best (smallest) time
//    in the base rounds (the neighbour round, or the all-pairs rounds). Follow-up rounds run fewer
//    tests in parallel, so they are judged against the fully loaded base, never against themselves.
//  - A node with a good test is ok. A node whose tests are all bad, with at least two different
//    partners of which at least one is ok (partners already known bad, one that left or failed its
//    GPU check, do not count), is at fault: "straggler" if it completed tests (they
//    were only slow), "faulty" if it failed them all or its best bandwidth is under the minimum.
//    Any other node with only bad tests is undecided: it needs another partner (a follow-up round).
//  - A bad test whose two nodes are both ok is a bad link; one explained by a node at fault is
//    "node"; one touching an undecided node is "undecided". A link that was only slow (it did
//    complete) is tested a second time before it is called bad, so that one stall of a busy host
//    does not condemn a link: until then it is "undecided" and listed in `recheck`.
//  - Final judging (no more rounds possible) turns undecided nodes into their best guess from their
//    own figures (faulty, or straggler against the median), marked decided = false.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace xtimer::netprobe {

// One pairwise test. a < b; `a` initiated it. Bandwidths in MB/s (1e6 bytes per second).
struct TestResult {
  int a = 0, b = 0;
  int round = 1;           // 1-based round number
  int step = 1;            // 1-based step inside the round (tests of one step run in parallel)
  bool base = true;        // part of the base plan (neighbours or all-pairs) rather than a follow-up
  bool completed = false;  // false: the test failed; `error` says why
  std::string error;
  double time_s = 0;                                  // time of the measured transfers, both directions together
  double fwd_mbps = 0;                                // a -> b
  double bwd_mbps = 0;                                // b -> a
  double latency_us = 0;                              // one-way (half the median round trip, or a tiny collective)
  std::vector<std::pair<std::string, double>> extra;  // backend-specific figures, reported as is
  // Stopped early (early_stop.h): the figures are rates of a partial transfer and time_s is the
  // time the whole test would have taken at them; stop_note says what was measured.
  bool stopped = false;
  std::string stop_note;

  double bandwidth_mbps() const { return fwd_mbps < bwd_mbps ? fwd_mbps : bwd_mbps; }
};

// Result of a node's local GPU check (nccl backend): copy bandwidth of each local GPU pair.
struct LocalResult {
  bool ran = false;  // false: no local check (tcp backend, or never reported)
  bool ok = false;   // false: the check itself failed; `error` says why
  std::string error;
  struct Pair {
    int src = 0, dst = 0;
    double mbps = 0;
    bool peer_access = false;
  };
  std::vector<Pair> pairs;
  std::vector<std::pair<int, double>> h2d_mbps;  // (gpu, host-to-device MB/s)
};

// What is known about a node apart from its tests.
struct NodeInput {
  bool present = false;     // joined the rendezvous
  std::string left_reason;  // non-empty: it left the rendezvous during the probe (faulty)
  LocalResult local;        // its local GPU check, if any
};

struct JudgeConfig {
  double straggler_factor = 2.0;
  double min_bandwidth_mbps = 0;  // 0: no absolute minimum
};

enum class NodeStatus { kOk, kStraggler, kFaulty, kMissing, kUndecided };
enum class LinkStatus { kOk, kBad, kNode, kUndecided };
const char* Name(NodeStatus s);
const char* Name(LinkStatus s);

struct NodeVerdict {
  int rank = 0;
  NodeStatus status = NodeStatus::kUndecided;
  bool decided = true;  // false: a best guess at the end, without the two-partner evidence
  std::string reason;   // empty for ok nodes
  int tests = 0;        // tests the node took part in
  bool tested = false;  // at least one completed test
  // Figures of the node's best completed test (smallest time).
  double time_s = 0, bandwidth_mbps = 0, latency_us = 0;
  std::vector<int> good_partners, bad_partners;  // sorted, distinct
};

struct LinkVerdict {
  int a = 0, b = 0;
  LinkStatus status = LinkStatus::kOk;
  std::string reason;  // why the last test of the pair was bad; empty when ok
  int test = -1;       // index (into the tests vector) of the last test of this pair
};

struct Verdict {
  std::vector<NodeVerdict> nodes;            // one per rank, index = rank
  std::vector<LinkVerdict> links;            // one per tested pair, sorted by (a, b)
  double reference_time_s = 0;               // the median the straggler factor applies to; 0 if none
  std::vector<int> undecided;                // ranks that need another partner
  std::vector<std::pair<int, int>> recheck;  // slow links between ok nodes, to test once more
  bool healthy() const;                      // every node ok and every link ok
};

double Median(std::vector<double> v);  // 0 for an empty vector; mean of the middle two if even

// Judges all tests so far. `nodes` has one entry per rank (missing entries: not present).
// With `final` set, undecided nodes get their best guess.
Verdict Judge(const std::vector<NodeInput>& nodes, const std::vector<TestResult>& tests, const JudgeConfig& config,
              bool final);

// Why a test is bad under `config` against `reference_time_s`, or "" when it is good.
std::string BadReason(const TestResult& t, double reference_time_s, const JudgeConfig& config);

}  // namespace xtimer::netprobe

// xtimer_run --network-check: the netprobe (netprobe/README.md) run in-process between a
// round's nodes after the round closes and before any worker starts, and the launcher's reading
// of its report (who passes, who is left out and why).
//
//  - Group rank 0 hosts the probe's rendezvous (RendezvousThread, every address, a free port);
//    the rendezvous store (etcd_rendezvous.cc) tells the others where it is.
//  - Every node, group rank 0 included, runs the node side with its group rank (RunProbeNode):
//    tcp backend, XTIMER_NETCHECK_SIZE bytes per test, XTIMER_NETCHECK_TIMEOUT per deadline, so
//    a node that silently drops traffic costs a few deadlines, not minutes.
//  - JudgeRound turns the report into one fate per node. The store publishes it, so every node
//    acts on the same verdict, including a node that could not reach the probe at all.
//
// Pure except RunProbeNode and ProbeSettingsFromEnv; no etcd here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "netprobe/options.h"

namespace xtimer::run {

struct ProbeSettings {
  // ProbeSettingsFromEnv sets these two (XTIMER_NETCHECK_SIZE, XTIMER_NETCHECK_TIMEOUT).
  int64_t size = 0;               // bytes per direction per test
  double timeout_s = 0;           // every connect, send and wait of the probe
  double min_bandwidth_mbps = 0;  // a node whose best test is slower is faulty (0: no floor)
  bool exclude_straggler = false;
};

// XTIMER_NETCHECK_SIZE, _TIMEOUT and _MIN_BANDWIDTH (a bad value: one warning, the default);
// `min_bandwidth_mbps` > 0 (--min-bandwidth) is the floor over XTIMER_NETCHECK_MIN_BANDWIDTH.
ProbeSettings ProbeSettingsFromEnv(bool exclude_straggler, double min_bandwidth_mbps);

// The probe's options for node `rank` of `nnodes` whose rendezvous is at host:port.
netprobe::Options ProbeOptions(const ProbeSettings& s, const std::string& host, int port, int rank, int nnodes);

// "host:port", "[v6]:port"; and back (false when malformed).
std::string JoinHostPort(const std::string& host, int port);
bool SplitProbeAddress(const std::string& s, std::string* host, int* port);

// Runs this node's side of the probe (prints the progress and the table on stdout). True with
// the rendezvous' report; false with *error when this node could not take part.
bool RunProbeNode(const ProbeSettings& s, const std::string& host, int port, int rank, int nnodes,
                  nlohmann::json* report, std::string* error);

enum class Fate {
  kPassed,     // ok (or a straggler kept without --exclude-straggler): not probed again
  kExcluded,   // left out of the run
  kUnchecked,  // no verdict on it this time (the probe failed, or its host was at fault)
};
const char* Name(Fate f);

struct NodeFate {
  Fate fate = Fate::kUnchecked;
  std::string status;  // the probe's word: ok, straggler, faulty (or "unchecked")
  std::string reason;  // why, for a node that is not plainly ok
};

struct RoundVerdict {
  std::string error;            // non-empty: the probe itself failed; every node is unchecked
  std::vector<NodeFate> nodes;  // by group rank
  double probe_time_s = 0;

  std::vector<int> Excluded() const;
  // One line: "8 nodes probed in 5.1 s: 7 passed, 1 left out (group rank 3: faulty: ...)".
  std::string Summary() const;
  nlohmann::json ToJson(const std::vector<std::string>& ids) const;
  // False with *error when `j` is not a verdict for `nnodes` nodes.
  static bool FromJson(const nlohmann::json& j, int nnodes, RoundVerdict* out, std::string* error);
};

// The verdict on a round of `nnodes` nodes from group rank 0's report (docs/formats.md).
//  - ok: passed. straggler: left out with `exclude_straggler`, else passed (the caller warns).
//    faulty: left out.
//  - missing (the node was in the round, so it runs, but never reached the probe's rendezvous
//    on group rank 0): it is unreachable, faulty, when group rank 0 reached at least as many
//    other nodes as it missed. Otherwise group rank 0 is the one cut off: it is left out and
//    the others stay unchecked (probed again in the next round, under a new group rank 0); so
//    too when group rank 0 itself never reached the probe it hosts. With
//    two nodes nobody can tell which side is cut off; both are left out, as the probe's own
//    judge does for a failed pair.
//  - a report with an error or without nodes: RoundVerdict::error, every node unchecked.
RoundVerdict JudgeRound(const nlohmann::json& report, int nnodes, bool exclude_straggler);

}  // namespace xtimer::run

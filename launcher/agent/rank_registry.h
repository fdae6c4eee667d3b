// What the node agent knows of each rank process below it, from the messages on the local
// channel: who it is, its state, its latest op statistics. Keyed by pid (a rank that
// reconnects keeps its entry). Thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector.pb.h"
#include "common/mutex.h"

namespace xtimer {

class RankRegistry {
 public:
  // hello, status, summary and dump_written messages; returns the rank's pid (or -1). For a
  // dump_written, *request_id (if given) is the request it answers: the message's, or the one
  // the rank was asked by signal (NoteSignalled), whose answer carries none. A steps message is
  // not the registry's (the agent relays it; docs/formats.md): ignored, -1.
  pid_t OnMessage(int conn, const nlohmann::json& msg, std::string* request_id = nullptr);
  // The connection closed: the process exited (or will not talk to us again).
  void OnClose(int conn);

  // One report per rank known; `with_ops` adds the op statistics.
  std::vector<v1::RankReport> Reports(bool with_ops) const;
  // Connections of ranks still running.
  std::vector<int> LiveConnections() const;
  // The connection of the running rank `rank` whose link thread reads messages; -1 if none.
  int ConnectionOfRank(int rank) const;
  // How to answer a dump request. Running ranks that dumped on their own in the last
  // `recent_s` seconds are not asked again: their dump (hang reason and trigger included) is
  // the one that matters and is sent again for the round, in case the collector that got it
  // first has restarted since. The others are asked.
  // Ranks without a link thread (they said hello at load, no CUDA call yet: "link": false) read
  // no messages; they are asked with the dump signal they named, if they named one.
  struct DumpPlan {
    std::vector<int> ask;                            // connections
    std::vector<std::pair<int, std::string>> reuse;  // rank, stack file
    std::vector<std::pair<pid_t, int>> signal;       // pid, dump signal
  };
  DumpPlan PlanDump(double recent_s) const;
  // The rank `pid` was sent its dump signal for `request_id`: its next dump answers it.
  void NoteSignalled(pid_t pid, const std::string& request_id);
  // Whether a rank's state changed (a hang found or resolved, an exit) since the last call.
  bool TakeStateChange();
  // A rank that reports a hang now: its rank and the trigger it reported; false if none.
  bool FindHung(int* rank, std::string* trigger) const;
  // A new round of workers (xtimer_run): ranks whose process ended are forgotten, so that the
  // old round's ranks are not reported beside the new ones.
  void ForgetExited();

 private:
  struct Entry {
    int conn = -1;
    v1::RankReport report;    // ops are the latest summary's
    int64_t own_dump_ms = 0;  // when it last reported a dump it took on its own
    std::string own_dump_path;
    bool has_link = true;           // a link thread reads our messages
    int dump_signal = 0;            // without one: the signal that makes it dump (0: none)
    std::string signalled_request;  // the request it was signalled for, not yet answered
  };
  Entry* Find(int conn) XT_REQUIRES(mu_);

  mutable Mutex mu_;  // every public method takes it
  std::map<pid_t, Entry> ranks_ XT_GUARDED_BY(mu_);
  bool changed_ XT_GUARDED_BY(mu_) = false;
};

// The op classes of a summary file (docs/formats.md, "Summary") as protocol messages.
std::vector<v1::OpStat> OpStatsOfSummary(const nlohmann::json& summary);

}  // namespace xtimer

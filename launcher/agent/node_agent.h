// The node agent: what xtimer_launch runs beside the command. It serves the local channel the
// ranks below it connect to, symbolises their stack dumps (elfutils, outside the training
// processes), serves their metrics for Prometheus, relays everything to a collector (or to a
// collector core embedded here, for a single node), and is the node's flash-checkpoint saver
// (ckpt/saver.h) unless another one already runs. It relays its ranks' step records to the
// collector's slowdown judge (stamped with its node name), asks a rank for Python samples when
// the judge wants them, and writes each new verdict into XTIMER_TIMELINE_PATH/slowdown.json and
// its /metrics. Nothing it does can stop the job: every failure is one log line and the command
// runs on.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "ckpt/saver.h"
#include "slowdown/slowdown_verdict.h"
#include "common/mutex.h"
#include "launcher/agent/collector_link.h"
#include "launcher/agent/desync_watch.h"
#include "launcher/agent/rank_channel.h"
#include "launcher/agent/rank_registry.h"
#include "launcher/agent/slow_node_eviction.h"

namespace xtimer {

class GuardedHttpServer;
class Symbolizer;

struct AgentConfig {
  std::string timeline_path;  // XTIMER_TIMELINE_PATH: also where an embedded collector writes
  int metrics_port = 0;       // XTIMER_METRICS_PORT, 0 = off
  std::string collector;      // XTIMER_COLLECTOR, "" = embedded
  std::string token_file;     // XTIMER_COLLECTOR_TOKEN_FILE
  std::string ca_file;        // XTIMER_COLLECTOR_CA
  double dump_wait_s = 0;     // XTIMER_DUMP_WAIT
  std::string node_name;      // XTIMER_NODE_NAME, else the host name
  // Every member from XTIMER_* (defaults: the settings table, common/env.cc); the only way one
  // is built.
  static AgentConfig FromEnv();
};

class NodeAgent {
 public:
  explicit NodeAgent(AgentConfig config);
  ~NodeAgent();
  // Creates the socket and starts the threads. The caller puts SocketPath() in its command's
  // environment as XTIMER_AGENT_SOCKET. False only if the local channel cannot exist (the command
  // then runs without an agent).
  bool Start(std::string* error);
  // The socket the ranks connect to; empty before Start.
  std::string SocketPath() const { return socket_dir_.empty() ? std::string() : socket_dir_ + "/agent.sock"; }
  // Called by the main thread every ~200 ms while the command runs.
  void Tick();
  // The command ended: last reports, then everything stops.
  void Stop();

  // For xtimer_run, between rounds of workers:
  // A rank reports a hang (its rank and trigger).
  // With XTIMER_DESYNC_ACTION=abort a desync counts as a hang of its first suspect.
  bool FindHung(int* rank, std::string* trigger) const {
    return FindDesyncAbort(rank, trigger) || registry_.FindHung(rank, trigger);
  }
  // The stacks asked for since `since_ms` (unix ms) are symbolised and handed to the collector,
  // and the embedded collector's round is merged. False while one is still under way.
  bool DumpsSettled(int64_t since_ms);
  // A new round of workers starts: the old round's ranks are forgotten.
  void BeginRound() {
    registry_.ForgetExited();
    ForgetDesync();
    MutexLock lock(slow_mu_);
    evict_history_.clear();  // a new round's slowdown must last the whole time again
  }
  // --evict-slow-nodes (slow_node_eviction.h): from now on the verdicts are kept for the rule.
  void WatchEvictions(const EvictionThresholds& t) XT_EXCLUDES(slow_mu_);
  // The rule on the verdicts kept so far, for this node (AgentConfig::node_name) in a round of
  // `job_nodes` nodes. Not evict while WatchEvictions was not called.
  EvictionCall CheckEviction(int job_nodes) const XT_EXCLUDES(slow_mu_);
  // The nodes evicted from this run so far (etcd's evicted/ keys, or this node itself):
  // /metrics' xtimer_slow_node_evictions_total.
  void SetEvictions(int total) { evictions_ = total; }
  // This node was evicted (xtimer_run, main thread, once the rendezvous stored `record`, the
  // JSON of the etcd key evicted/<addr>; `reason`, the eviction's log line): the collector is
  // told (CollectorLink::Eviction), for its page and /metrics; Stop() waits for it as for the
  // last report. A record that cannot be read is one log line and nothing is sent.
  void ReportEviction(const std::string& record, const std::string& reason);
  const std::string& node_name() const { return config_.node_name; }
  // Waits (at most `timeout_s`) until the checkpoint saver has written what it must: the
  // newest memory snapshots of workers that died. True if done (or no saver runs here).
  bool WaitCheckpointsPersisted(double timeout_s);

 private:
  void OnRankMessage(int conn, const nlohmann::json& msg) XT_EXCLUDES(mu_);
  void OnDumpRequest(const std::string& dump_id) XT_EXCLUDES(mu_);
  void OnSteps(const nlohmann::json& msg);
  // Ranks out of step (node_agent_desync.cc): fingerprints in, desync verdicts out.
  void OnPrints(const nlohmann::json& msg);
  void CheckDesync();
  bool FindDesyncAbort(int* rank, std::string* trigger) const;
  // The collector found ranks out of step across nodes (from the link's thread): with
  // XTIMER_DESYNC_ACTION=abort, handled as the agent's own desync, unless `comm` is a
  // communicator of an earlier round (a verdict that arrived after the restart).
  void OnCollectorDesync(int32_t rank, const std::string& comm, const std::string& reason) XT_EXCLUDES(desync_mu_);
  void ForgetDesync();  // a new round: the old round's desync is acted on
  void AbortForDesync(int32_t rank, const std::string& line) XT_EXCLUDES(desync_mu_);
  void OnSampleRequest(int32_t rank, double seconds, double hz);
  void OnVerdict(const slowdown::Verdict& verdict) XT_EXCLUDES(slow_mu_);
  void StartMetrics();
  std::string MetricsText();
  void SymbolizeLoop() XT_EXCLUDES(mu_);
  void StartSaver();
  void FinishSaver();

  struct Dump {
    std::string path;
    int rank;
    std::string request_id;
  };
  void HandOn(Symbolizer& symbolizer, const Dump& d);  // symbolise one dump, upload it

  AgentConfig config_;
  std::string socket_dir_;
  RankChannel channel_;
  RankRegistry registry_;
  std::unique_ptr<CollectorLink> link_;
  std::unique_ptr<GuardedHttpServer> http_;  // /metrics
  std::thread symbolize_thread_, saver_thread_;
  std::unique_ptr<ckpt::Saver> saver_;
  std::atomic<bool> saver_stop_{false};

  Mutex mu_;  // the dump queue
  CondVar cv_;
  std::deque<Dump> dumps_ XT_GUARDED_BY(mu_);
  int symbolizing_ XT_GUARDED_BY(mu_) = 0;  // dumps taken from the queue and not yet handed on
  bool stopping_ XT_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> last_dump_request_ms_{0};
  std::atomic<int64_t> steps_warned_ms_{0};  // the last line about unusable step records

  DesyncWatch desync_{DesyncSettings::FromEnv()};
  std::atomic<int64_t> prints_warned_ms_{0};  // the last line about unusable fingerprints
  mutable Mutex desync_mu_;
  int desync_abort_rank_ XT_GUARDED_BY(desync_mu_) = -1;  // XTIMER_DESYNC_ACTION=abort: a suspect
  std::string desync_abort_why_ XT_GUARDED_BY(desync_mu_);
  int64_t desync_abort_at_ms_ XT_GUARDED_BY(desync_mu_) = 0;  // monotonic: after the ranks' stacks
  // Communicators this round's ranks sent fingerprints of, and those of earlier rounds.
  std::set<std::string> round_comms_ XT_GUARDED_BY(desync_mu_), old_comms_ XT_GUARDED_BY(desync_mu_);

  mutable Mutex slow_mu_;  // the verdicts (written by the link's thread, read by /metrics and the main thread)
  slowdown::Verdict verdict_ XT_GUARDED_BY(slow_mu_);
  bool watch_evictions_ XT_GUARDED_BY(slow_mu_) = false;
  EvictionThresholds evict_thresholds_ XT_GUARDED_BY(slow_mu_);
  std::deque<slowdown::Verdict> evict_history_ XT_GUARDED_BY(slow_mu_);
  std::atomic<int> evictions_{0};
  bool slowdown_write_warned_ XT_GUARDED_BY(slow_mu_) = false;
};

}  // namespace xtimer

// xtimer_run's loop on one node: join a round, start the node's workers with torchrun's
// environment under the preload, watch them, and go to a new round when a worker fails, a rank
// hangs (after its stacks are merged), or the rendezvous says so (a node lost or waiting).
// After --max-restarts failures it ends with a torchrun-like summary. The node agent
// (launcher/agent/node_agent.h: stacks, metrics, collector link, checkpoint saver) lives for the whole run,
// so its memory snapshots outlive the workers.
//
// Everything runs on the calling (main) thread; the forwarded signals and SIGCHLD must be
// blocked before any thread starts (ChildProcess::BlockSignals).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "launcher/run/round_rendezvous.h"
#include "launcher/run/run_options.h"
#include "launcher/run/warm_pool.h"
#include "launcher/run/worker_group.h"

namespace xtimer {
class NodeAgent;
}

namespace xtimer::run {

// What xtimer_run takes from the environment, read once before the agent starts and passed on as
// values: the launcher never writes a setting into its own environment to read it back. The
// defaults are the settings table's (common/env.cc), except where said.
struct RunSettings {
  // XTIMER_HANG_ACTION, "restart" when unset (xtimer_run's default; the table's is the preload's):
  // restart makes the agent restart the workers once a hung rank's stacks are merged. The workers
  // get the same value (WorkerVariables), for their preload.
  std::string hang_action;
  double dump_wait_s = 0;          // XTIMER_DUMP_WAIT: how long a hang's stacks may take to merge
  double gpu_check_timeout_s = 0;  // XTIMER_GPU_CHECK_TIMEOUT: --precheck's and --comm-perf-test's deadline
  // XTIMER_CKPT_PERSIST_ON_FAILURE for the workers' checkpointers: "0" under --save-at-breakpoint 0
  // when the user set nothing; "" leaves the workers' own (an explicit variable wins).
  std::string persist_on_failure;
  // LD_PRELOAD and PYTHONPATH for the workers (launcher/preload_env.h), set by xtimer_run.
  std::vector<std::string> preload;
  // XTIMER_AGENT_SOCKET for the workers: xtimer_run's own node agent (NodeAgent::SocketPath), or
  // empty (they inherit an outer xtimer_launch's, or run without an agent).
  std::string agent_socket;
  // The warm interpreters' program (warm_worker.py beside the library), "" = none: XTIMER_WARM_START=0
  // or workers that are not Python (--no-python). Their imports: WarmPool::ImportsFromSettings.
  std::string warm_script;
  std::vector<std::string> warm_imports;
  double warm_delay_s = 0;  // XTIMER_WARM_DELAY: how long a round trains before they start

  static RunSettings FromEnv(const RunOptions& o);
};

// The variables xtimer_run sets for its workers on top of what they inherit (KEY=VALUE): only
// what the workers read (the preload itself, its hang action, the agent's socket, the
// checkpointer's persist-on-failure). --comm-perf-test's ranks get the same.
std::vector<std::string> WorkerVariables(const RunSettings& s);

// `base` with each KEY=VALUE of `vars` set (replacing that key's entry, else appended).
std::vector<std::string> WithVariables(std::vector<std::string> base, const std::vector<std::string>& vars);

// Worker environment variables for one worker of a round (KEY=VALUE, on top of `base`).
std::vector<std::string> WorkerEnvironment(const RunOptions& o, const Round& round, int local_rank,
                                           const std::vector<std::string>& base);

class ElasticAgent {
 public:
  // `agent` may be null (no node agent could start).
  ElasticAgent(RunOptions options, RunSettings settings, std::unique_ptr<Rendezvous> rendezvous, NodeAgent* agent);
  ~ElasticAgent();
  // Runs until the job ends on this node; returns the exit status for xtimer_run (0 success,
  // 1 failure, 128+N when stopped by signal N).
  int Run();

 private:
  enum class Outcome { kSucceeded, kFailed, kHung, kNewRound, kSignal, kEvicted };
  Outcome Monitor(WorkerGroup& group, std::string* why, int* signal);
  // --evict-slow-nodes, once a second while workers run: true when this node leaves the run
  // (the etcd record written, the others on their way to a new round); *why is the log line.
  bool EvictIfSlow(std::string* why);
  // Starts the warm interpreters for the next round once warm_at_ has come (warm_pool.h).
  void FillWarmWhenDue();
  // --comm-perf-test before the round's workers: 0 when it ended (well or not), else the stop
  // signal that came meanwhile.
  int CommPerfTest(const Round& round);
  std::vector<WorkerSpec> Specs(const Round& round) const;
  void PrintFailureSummary(const std::string& headline);
  void PersistCheckpoints();

  RunOptions o_;
  RunSettings settings_;
  std::unique_ptr<Rendezvous> rdzv_;
  NodeAgent* agent_;
  std::vector<std::vector<int>> numa_cpus_;  // --numa-affinity: each local rank's CPUs
  std::string run_log_dir_;                  // LOG_DIR/<run id>_<random> ("" = none: --log-dir /dev/null)
  std::string temp_root_;                    // /tmp/torchelastic_<random> when no --log-dir was given
  bool keep_temp_root_ = false;
  Round round_;
  WorkerExit first_failure_;
  std::vector<WorkerExit> other_failures_;
  bool have_failure_ = false;
  std::set<std::string> eviction_said_;  // findings already said to stay (said once each)
  std::unique_ptr<WarmPool> warm_;       // null: every worker starts fresh
  std::vector<WorkerSpec> warm_specs_;   // this round's workers, for whom warm_ is filled...
  double warm_at_ = 0;                   // ...at this monotonic time (0: done)
};

}  // namespace xtimer::run

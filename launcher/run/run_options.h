// xtimer_run's command line: torchrun's flags and dlrover-run's (both spellings, `--a-b`/`--a_b`,
// `--flag value`/`--flag=value`), then the training script and its arguments, plus xtimer's own
// flags (--stop-grace). As under torchrun and dlrover-run, a flag not on the command line takes
// its value from PET_<FLAG> (PET_NPROC_PER_NODE=8, PET_NETWORK_CHECK=1). Parsing never exits and
// never prints: a bad flag gives one line naming the flag and what it accepts; a flag accepted
// without effect here leaves one line in RunOptions::warnings saying why.
#pragma once

#include <string>
#include <vector>

namespace xtimer::run {

// Which streams of a worker go to a file under --log-dir (torchrun's --redirects / --tee):
// 0 none, 1 stdout, 2 stderr, 3 both.
enum Streams { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

struct RunOptions {
  int min_nodes = 1, max_nodes = 1;     // --nnodes N | MIN:MAX
  int nproc_per_node = 1;               // --nproc-per-node N | cpu | gpu | auto
  int max_restarts = 0;                 // --max-restarts
  int node_unit = 1;                    // --node-unit (dlrover-run): a round has a multiple of this many nodes
  std::string rdzv_backend = "static";  // static | etcd (etcd-v2 is taken as etcd)
  std::string rdzv_endpoint;            // host:port of etcd
  std::string rdzv_id = "none";
  double join_timeout_s = 600;      // --rdzv-conf join_timeout= (torchrun: timeout=)
  double last_call_timeout_s = 30;  // --rdzv-conf last_call_timeout=
  double lease_ttl_s = 10;          // --rdzv-conf lease_ttl= (ours): a silent node drops out after it
  int node_rank = 0;                // --node-rank (static)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_given = false;
  bool standalone = false;
  double monitor_interval_s = 0.1;
  std::string local_addr;  // what other nodes use to reach this one ("" = host name)
  bool no_python = false;
  bool module = false;  // -m: run the script as `python -m`
  std::string role = "default";
  std::string log_dir;
  int redirects = kNone, tee = kNone;
  std::vector<int> local_ranks_filter;  // --local-ranks-filter: local ranks shown on the terminal (empty: all)
  bool run_path = false;                // --run-path: the script runs with Python, whatever --no-python/-m say
  // --signals-to-handle: told to the workers in TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun 2.9+
  // does. xtimer_run itself always stops on SIGINT, SIGTERM, SIGHUP, SIGQUIT and passes SIGUSR1,
  // SIGUSR2 on, so a list may name only those.
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // dlrover-run's (and ours).
  bool network_check = false;
  bool exclude_straggler = false;
  bool save_at_breakpoint = true;
  int precheck = 0;               // --precheck 0|1|2: 1 checks this node's GPUs before it joins, 2 also
                                  // measures the round's collective (--comm-perf-test)
  bool comm_perf_test = false;    // --comm-perf-test
  bool numa_affinity = false;     // --numa-affinity: each worker on the CPUs of its GPU's NUMA node
  bool auto_config = false;       // --auto-config: nodes from NODE_NUM, workers from the GPUs
  double min_bandwidth_mbps = 0;  // --min-bandwidth MB/s: the network check's floor (0: none)
  double stop_grace_s = 5;        // SIGTERM, then SIGKILL after this many seconds
  // --evict-slow-nodes (ours): a node the slowdown judge names slow, for a cause that stays with
  // the node, at a cost of at least --evict-slow-cost of the job's step time for
  // --evict-slow-after seconds, leaves the run (launcher/agent/slow_node_eviction.h).
  bool evict_slow_nodes = false;
  double evict_slow_cost = 0.2;
  double evict_slow_after_s = 10;

  // One line each, for xtimer_run to print once: flags accepted without effect here (why), and
  // what --precheck and --auto-config chose.
  std::vector<std::string> warnings, notes;

  std::vector<std::string> script;  // the training script (or program) and its arguments

  bool elastic() const { return rdzv_backend == "etcd"; }
};

// Parses argv[1..] (PET_* from the environment first). False with *error (one line) on a bad or
// missing value; *help set when --help was asked (then nothing else is checked).
bool ParseRunOptions(int argc, char** argv, RunOptions* out, std::string* error, bool* help);

// The usage text, made from the same table as the parser (run_options.cc: name, short alias,
// how the value is taken, help).
std::string RunUsage();

// Every flag's name (dashed, as the usage writes it), in the table's order.
std::vector<std::string> RunFlagNames();

// The command line a worker runs: `python3 -u [-m] script args` (python3 from PATH, or
// XTIMER_PYTHON), or the program itself with --no-python (--run-path: always Python, no -m).
std::vector<std::string> WorkerCommand(const RunOptions& o);

}  // namespace xtimer::run

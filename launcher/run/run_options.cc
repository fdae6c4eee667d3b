#include "launcher/run/run_options.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "common/env.h"
#include "common/parse_number.h"
#include "launcher/run/numa.h"

namespace xtimer::run {
namespace {

// torchrun writes flags with dashes or underscores; we compare the dashed form.
std::string Dashed(std::string s) {
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

bool ToInt(const std::string& flag, const std::string& v, long long lo, long long hi, int* out, std::string* error) {
  long long n = 0;
  if (!ParseInt(v, lo, hi, &n)) {
    *error =
        flag + " takes a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not '" + v + "'";
    return false;
  }
  *out = static_cast<int>(n);
  return true;
}

bool ToSeconds(const std::string& flag, const std::string& v, double* out, std::string* error) {
  if (!ParseDouble(v, out) || *out < 0) {
    *error = flag + " takes seconds (a number >= 0), not '" + v + "'";
    return false;
  }
  return true;
}

bool ParseNnodes(const std::string& v, RunOptions* o, std::string* error) {
  size_t colon = v.find(':');
  std::string lo = v.substr(0, colon), hi = colon == std::string::npos ? lo : v.substr(colon + 1);
  if (!ToInt("--nnodes", lo, 1, 1 << 20, &o->min_nodes, error) ||
      !ToInt("--nnodes", hi, 1, 1 << 20, &o->max_nodes, error))
    return (*error = "--nnodes takes N or MIN:MAX (whole numbers >= 1), not '" + v + "'"), false;
  if (o->min_nodes > o->max_nodes) return (*error = "--nnodes " + v + ": MIN is larger than MAX"), false;
  return true;
}

// One per GPU the workers can see: CUDA_VISIBLE_DEVICES's GPUs, else every NVIDIA GPU in sysfs
// (0 when none).
int VisibleGpuCount() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<Gpu> gpus;
  std::string why;
  if (VisibleGpus(ListGpus(SysfsRoot()), visible, &gpus, &why)) return static_cast<int>(gpus.size());
  // Named by UUID (or naming more GPUs than sysfs shows): CUDA sees as many as it names.
  int n = 1;
  for (const char* p = visible; *p; ++p) n += *p == ',';
  return n;
}

bool ParseNproc(const std::string& v, RunOptions* o, std::string* error) {
  if (v == "cpu") {
    o->nproc_per_node = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    return true;
  }
  if (v == "gpu" || v == "auto") {
    // One per visible GPU, as torchrun's; one on a machine without GPUs.
    o->nproc_per_node = std::max(VisibleGpuCount(), 1);
    return true;
  }
  return ToInt("--nproc-per-node", v, 1, 4096, &o->nproc_per_node, error);
}

bool ParseStreams(const std::string& flag, const std::string& v, int* out, std::string* error) {
  // torchrun accepts one value for every local rank ("3") or per rank ("0:1,1:3"); we take one.
  if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return (*out = v[0] - '0'), true;
  *error = flag + " takes 0 (none), 1 (stdout), 2 (stderr) or 3 (both), not '" + v + "'";
  return false;
}

bool ParseRdzvConf(const std::string& v, RunOptions* o, std::string* error) {
  std::stringstream in(v);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) return (*error = "--rdzv-conf takes key=value,..., not '" + item + "'"), false;
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    double* target = nullptr;
    if (key == "join_timeout" || key == "timeout") target = &o->join_timeout_s;
    else if (key == "last_call_timeout") target = &o->last_call_timeout_s;
    else if (key == "lease_ttl") target = &o->lease_ttl_s;
    else if (key == "close_timeout" || key == "read_timeout" || key == "keep_alive_interval" ||
             key == "keep_alive_max_attempt" || key == "is_host" || key == "protocol" || key == "cacert" ||
             key == "cert" || key == "key")
      continue;  // torchrun's keys that have no meaning here; accepted so that command lines carry over
    else
      return (*error = "--rdzv-conf: unknown key '" + key + "' (known: join_timeout, last_call_timeout, lease_ttl)"),
             false;
    if (!ToSeconds("--rdzv-conf " + key, value, target, error)) return false;
  }
  if (o->lease_ttl_s < 1) return (*error = "--rdzv-conf lease_ttl must be at least 1 second"), false;
  return true;
}

bool ParseRanksFilter(const std::string& flag, const std::string& v, RunOptions* o, std::string* error) {
  // torchrun's form: local ranks separated by commas ("0" or "0,1,3").
  o->local_ranks_filter.clear();
  std::stringstream in(v);
  std::string item;
  while (std::getline(in, item, ',')) {
    int r = 0;
    if (!ToInt(flag, item, 0, 1 << 20, &r, error))
      return (*error = flag + " takes local ranks separated by commas (0,1,3), not '" + v + "'"), false;
    o->local_ranks_filter.push_back(r);
  }
  if (o->local_ranks_filter.empty())
    return (*error = flag + " takes local ranks separated by commas (0,1,3), not '" + v + "'"), false;
  return true;
}

// "0:1", the form of one --box-pairs entry.
bool IsPair(const std::string& s) {
  size_t colon = s.find(':');
  long long a = 0, b = 0;
  return colon != std::string::npos && ParseInt(s.substr(0, colon), 0, 1 << 20, &a) &&
         ParseInt(s.substr(colon + 1), 0, 1 << 20, &b);
}

// How a flag takes its value.
enum class Arity {
  kSwitch,    // --flag (from PET_FLAG: 1 or 0); the setter gets "1" or "0"
  kOptional,  // --flag or --flag=V; the setter gets V or ""
  kValue,     // --flag V or --flag=V (a short alias also -xV)
  kPairs,     // --flag P [P ...]: the arguments that follow while they look like N:M (space-joined)
};

// Where the usage lists a flag.
enum class Group {
  kTorchrun,
  kDlrover,
  kDlroverIgnored,  // dlrover-run's, accepted with a warning: one line of names
  kXtimer,
};

// What the setters work on: the options, the error, and what the checks after the flags need.
struct Parser {
  RunOptions* o = nullptr;
  std::string* error = nullptr;
  bool nnodes_given = false, nproc_given = false, rdzv_given = false, evict_threshold_given = false;
  std::set<std::string> warned;

  bool Fail(std::string why) {
    *error = std::move(why);
    return false;
  }
  // A flag that has no effect here: one line, once, saying why.
  bool NoEffect(const std::string& flag, const std::string& why) {
    if (warned.insert(flag).second) o->warnings.push_back(flag + ": " + why);
    return true;
  }
};

using Arg = const std::string&;
// Applies one flag's value (the flag's name as the table writes it, the value); false with
// *p.error.
using Setter = bool (*)(Parser& p, Arg flag, Arg value);

struct FlagSpec {
  const char* name;   // dashed: "--nproc-per-node" (--nproc_per_node is the same flag)
  const char* alias;  // a short form ("-m"), or nullptr
  Arity arity;
  Group group;
  const char* value;  // the value as the usage writes it ("N|MIN:MAX"); "" for a switch
  const char* help;   // the usage's text ('\n': a continuation line)
  Setter set;
};

template <bool RunOptions::*M>
bool SetSwitch(Parser& p, Arg, Arg v) {
  p.o->*M = v == "1";
  return true;
}
template <std::string RunOptions::*M>
bool SetString(Parser& p, Arg, Arg v) {
  p.o->*M = v;
  return true;
}
template <int RunOptions::*M, long long kLo, long long kHi>
bool SetInt(Parser& p, Arg f, Arg v) {
  return ToInt(f, v, kLo, kHi, &(p.o->*M), p.error);
}
// A file or folder: a value that starts with "--" is the next option taken as the path by
// mistake (`--log-dir --no-python` made a folder named --no-python), never a path.
template <std::string RunOptions::*M>
bool SetFolder(Parser& p, Arg f, Arg v) {
  if (v.rfind("--", 0) == 0)
    return p.Fail(f + " needs a folder, not the option '" + v + "' (a folder whose name starts with -- is written ./" +
                  v + ")");
  p.o->*M = v;
  return true;
}
template <int RunOptions::*M>
bool SetStreams(Parser& p, Arg f, Arg v) {
  return ParseStreams(f, v, &(p.o->*M), p.error);
}

using A = Arity;
using G = Group;

// Every flag, in the order of the usage (and of the PET_* fallback).
const FlagSpec
    kFlags
        [] =
            {
                // torchrun's.
                {"--nnodes", nullptr, A::kValue, G::kTorchrun, "N|MIN:MAX",
                 "nodes (default 1; MIN:MAX needs --rdzv-backend etcd)",
                 [](Parser& p, Arg, Arg v) { return p.nnodes_given = true, ParseNnodes(v, p.o, p.error); }},
                {"--nproc-per-node", nullptr, A::kValue, G::kTorchrun, "N",
                 "workers on this node (or cpu, gpu, auto; default 1)",
                 [](Parser& p, Arg, Arg v) { return p.nproc_given = true, ParseNproc(v, p.o, p.error); }},
                {"--max-restarts", nullptr, A::kValue, G::kTorchrun, "K",
                 "restarts of the worker group before giving up (default 0)",
                 SetInt<&RunOptions::max_restarts, 0, 1 << 30>},
                {"--node-unit", nullptr, A::kValue, G::kTorchrun, "N",
                 "(dlrover-run) rounds have a multiple of N nodes; extra nodes wait (default 1)",
                 SetInt<&RunOptions::node_unit, 1, 1 << 20>},
                {"--rdzv-backend", nullptr, A::kValue, G::kTorchrun, "static|etcd",
                 "static: fixed nodes; etcd: elastic (default static)",
                 [](Parser& p, Arg, Arg v) {
                   p.rdzv_given = true;
                   if (v == "etcd" || v == "etcd-v2") return p.o->rdzv_backend = "etcd", true;
                   if (v == "static") return p.o->rdzv_backend = v, true;
                   return p.Fail("--rdzv-backend " + v +
                                 " is not supported by xtimer_run: use static (fixed nodes) or etcd "
                                 "(elastic, with --rdzv-endpoint HOST:PORT of an etcd v3)");
                 }},
                {"--rdzv-endpoint", nullptr, A::kValue, G::kTorchrun, "HOST:PORT",
                 "the etcd server (static: the master)",
                 [](Parser& p, Arg, Arg v) { return p.rdzv_given = true, p.o->rdzv_endpoint = v, true; }},
                {"--rdzv-id", nullptr, A::kValue, G::kTorchrun, "ID", "the job's name, shared by its nodes",
                 SetString<&RunOptions::rdzv_id>},
                {"--rdzv-conf", nullptr, A::kValue, G::kTorchrun, "join_timeout=S,last_call_timeout=S,lease_ttl=S",
                 "(600, 30, 10)", [](Parser& p, Arg, Arg v) { return ParseRdzvConf(v, p.o, p.error); }},
                {"--standalone", nullptr, A::kSwitch, G::kTorchrun, "", "one node, no rendezvous server, a free port",
                 SetSwitch<&RunOptions::standalone>},
                {"--node-rank", nullptr, A::kValue, G::kTorchrun, "R", "this node's rank (static rendezvous)",
                 SetInt<&RunOptions::node_rank, 0, 1 << 20>},
                {"--master-addr", nullptr, A::kValue, G::kTorchrun, "A", "rank 0's host (static rendezvous)",
                 SetString<&RunOptions::master_addr>},
                {"--master-port", nullptr, A::kValue, G::kTorchrun, "P", "rank 0's port (static rendezvous)",
                 [](Parser& p, Arg f, Arg v) {
                   return p.o->master_port_given = true, ToInt(f, v, 1, 65535, &p.o->master_port, p.error);
                 }},
                {"--local-addr", nullptr, A::kValue, G::kTorchrun, "A",
                 "how other nodes reach this one (default: the host name)", SetString<&RunOptions::local_addr>},
                {"--monitor-interval", nullptr, A::kValue, G::kTorchrun, "S",
                 "how often workers are checked (default 0.1)",
                 [](Parser& p, Arg f, Arg v) {
                   if (!ToSeconds(f, v, &p.o->monitor_interval_s, p.error)) return false;
                   if (p.o->monitor_interval_s < 0.01) p.o->monitor_interval_s = 0.01;
                   return true;
                 }},
                {"--no-python", nullptr, A::kSwitch, G::kTorchrun, "", "run the script as a program",
                 SetSwitch<&RunOptions::no_python>},
                {"--module", "-m", A::kSwitch, G::kTorchrun, "", "run the script as `python -m`",
                 SetSwitch<&RunOptions::module>},
                {"--run-path", nullptr, A::kSwitch, G::kTorchrun, "",
                 "run the script with Python (over --no-python and -m)", SetSwitch<&RunOptions::run_path>},
                {"--role", nullptr, A::kValue, G::kTorchrun, "NAME", "the workers' role (default default)",
                 SetString<&RunOptions::role>},
                {"--log-dir", nullptr, A::kValue, G::kTorchrun, "DIR",
                 "each worker's error file and logs, in torchrun's layout", SetFolder<&RunOptions::log_dir>},
                {"--redirects", "-r", A::kValue, G::kTorchrun, "N",
                 "workers' streams to files: 0 none, 1 stdout, 2 stderr, 3 both", SetStreams<&RunOptions::redirects>},
                {"--tee", "-t", A::kValue, G::kTorchrun, "N", "as --redirects, and on the terminal too",
                 SetStreams<&RunOptions::tee>},
                {"--local-ranks-filter", nullptr, A::kValue, G::kTorchrun, "R,R",
                 "only these local ranks' output on the terminal (files keep all)",
                 [](Parser& p, Arg f, Arg v) { return ParseRanksFilter(f, v, p.o, p.error); }},
                // Our workers are always processes of their own, which is what torchrun's methods give a script.
                {"--start-method", nullptr, A::kValue, G::kTorchrun, "spawn|fork|forkserver",
                 "accepted; workers are always their own processes",
                 [](Parser& p, Arg f, Arg v) {
                   if (v == "spawn" || v == "fork" || v == "forkserver") return true;
                   return p.Fail(f + " takes spawn, fork or forkserver, not '" + v + "'");
                 }},
                {"--signals-to-handle", nullptr, A::kValue, G::kTorchrun, "SIG,SIG",
                 "told to the workers (TORCHELASTIC_SIGNALS_TO_HANDLE); xtimer_run always stops on\n"
                 "SIGINT, SIGTERM, SIGHUP, SIGQUIT and passes SIGUSR1, SIGUSR2 on",
                 [](Parser& p, Arg f, Arg v) {
                   static const std::set<std::string> kHandled = {"SIGTERM", "SIGINT",  "SIGHUP",
                                                                  "SIGQUIT", "SIGUSR1", "SIGUSR2"};
                   std::stringstream items(v);
                   std::string name;
                   int count = 0;
                   while (std::getline(items, name, ',')) {
                     ++count;
                     if (!kHandled.count(name))
                       return p.Fail(f + ": '" + name +
                                     "' is not a signal xtimer_run handles (SIGTERM, SIGINT, SIGHUP, SIGQUIT, "
                                     "SIGUSR1, SIGUSR2)");
                   }
                   if (count == 0) return p.Fail(f + " needs a comma-separated list of signal names");
                   p.o->signals_to_handle = v;
                   return true;
                 }},
                {"--logs-specs", nullptr, A::kValue, G::kTorchrun, "NAME",
                 "accepted, no effect (a Python plugin of torchrun)",
                 [](Parser& p, Arg f, Arg) {
                   return p.NoEffect(
                       f,
                       "names a Python LogsSpecs plugin of torchrun; xtimer_run writes --log-dir in torchrun's "
                       "default layout itself: ignored");
                 }},
                // dlrover-run's.
                {"--network-check", nullptr, A::kSwitch, G::kDlrover, "",
                 "probe the round's nodes before its workers start; faulty nodes leave\n"
                 "(etcd rendezvous; XTIMER_NETCHECK_SIZE / _TIMEOUT, default 3M / 4 s)",
                 SetSwitch<&RunOptions::network_check>},
                {"--exclude-straggler", nullptr, A::kSwitch, G::kDlrover, "",
                 "with --network-check, stragglers leave too", SetSwitch<&RunOptions::exclude_straggler>},
                {"--min-bandwidth", nullptr, A::kValue, G::kDlrover, "MB/s",
                 "with --network-check, a node slower than this is faulty",
                 [](Parser& p, Arg f, Arg v) {
                   if (ParseDouble(v, &p.o->min_bandwidth_mbps) && p.o->min_bandwidth_mbps >= 0) return true;
                   return p.Fail(f + " takes MB/s (a number >= 0), not '" + v + "'");
                 }},
                {"--precheck", nullptr, A::kValue, G::kDlrover, "0|1|2",
                 "1: a matmul on each GPU and an allreduce over them before this node\n"
                 "joins (a node that fails does not join), and --network-check with\n"
                 "etcd; 2: also --comm-perf-test (default 0)",
                 SetInt<&RunOptions::precheck, 0, 2>},
                {"--comm-perf-test", nullptr, A::kSwitch, G::kDlrover, "",
                 "measure the round's allreduce bandwidth before training; print a table",
                 SetSwitch<&RunOptions::comm_perf_test>},
                {"--numa-affinity", nullptr, A::kSwitch, G::kDlrover, "",
                 "bind each worker to the CPUs of its GPU's NUMA node", SetSwitch<&RunOptions::numa_affinity>},
                {"--auto-config", nullptr, A::kSwitch, G::kDlrover, "",
                 "nodes from NODE_NUM, workers per node from the GPUs (flags given win)",
                 SetSwitch<&RunOptions::auto_config>},
                {"--save-at-breakpoint", nullptr, A::kOptional, G::kDlrover, "0|1",
                 "persist the newest memory checkpoint when a worker fails (default 1)",
                 [](Parser& p, Arg, Arg v) {
                   if (v != "" && v != "0" && v != "1")
                     return p.Fail("--save-at-breakpoint takes 0 or 1, not '" + v + "'");
                   return p.o->save_at_breakpoint = v != "0", true;
                 }},
                {"--accelerator", nullptr, A::kValue, G::kDlrover, "nvidia.com/gpu|ascend-npu|mthreads.com/gpu",
                 "(xtimer times NVIDIA GPUs)",
                 [](Parser& p, Arg f, Arg v) {
                   if (v == "nvidia.com/gpu") return true;
                   if (v == "ascend-npu" || v == "mthreads.com/gpu")
                     return p.NoEffect(f, "xtimer times NVIDIA GPUs (CUDA, NCCL); on " + v +
                                              " the workers run, untimed, and the GPU checks find no GPU");
                   return p.Fail(f + " takes nvidia.com/gpu, ascend-npu or mthreads.com/gpu, not '" + v + "'");
                 }},
                {"--auto-tunning", nullptr, A::kSwitch, G::kDlroverIgnored, "", "",
                 [](Parser& p, Arg f, Arg v) {
                   return v != "1" ||
                          p.NoEffect(f,
                                     "DLRover's job master tunes the batch size and learning rate of a running "
                                     "job; xtimer_run has no job master: ignored");
                 }},
                {"--training-port", nullptr, A::kValue, G::kDlroverIgnored, "P", "",
                 [](Parser& p, Arg f, Arg v) {
                   int port = 0;
                   return ToInt(f, v, 1, 65535, &port, p.error) &&
                          p.NoEffect(
                              f, "DLRover gives it to Ascend's HCCL as its first port; NCCL does not use it: ignored");
                 }},
                {"--switchbox-check", nullptr, A::kSwitch, G::kDlroverIgnored, "", "",
                 [](Parser& p, Arg f, Arg v) {
                   return v != "1" ||
                          p.NoEffect(f,
                                     "checks the links between a MetaX machine's GPUs and its switchbox, and xtimer "
                                     "knows no switchbox to check: ignored (--network-check still runs)");
                 }},
                {"--box-pairs", nullptr, A::kPairs, G::kDlroverIgnored, "P [P ...]", "",
                 [](Parser& p, Arg f, Arg) {
                   return p.NoEffect(f, "pairs the switchbox's sockets for --switchbox-check: ignored");
                 }},
                {"--min-channels", nullptr, A::kValue, G::kDlroverIgnored, "N", "",
                 [](Parser& p, Arg f, Arg v) {
                   int n = 0;
                   return ToInt(f, v, 0, 1 << 20, &n, p.error) &&
                          p.NoEffect(f, "the switchbox channels --switchbox-check needs working: ignored");
                 }},
                {"--ucp-device-type", nullptr, A::kValue, G::kDlroverIgnored, "T", "",
                 [](Parser& p, Arg f, Arg) {
                   return p.NoEffect(
                       f,
                       "where DLRover converts DeepSpeed universal checkpoints; xtimer's checkpoints need no "
                       "conversion: ignored");
                 }},
                // Ours.
                {"--stop-grace", nullptr, A::kValue, G::kXtimer, "S",
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 5)",
                 [](Parser& p, Arg f, Arg v) { return ToSeconds(f, v, &p.o->stop_grace_s, p.error); }},
                {"--evict-slow-nodes", nullptr, A::kSwitch, G::kXtimer, "",
                 "a node the slowdown judge names slow (GPU, or its own network) leaves\n"
                 "the run; a waiting spare takes its place (etcd rendezvous; off by default)",
                 SetSwitch<&RunOptions::evict_slow_nodes>},
                {"--evict-slow-cost", nullptr, A::kValue, G::kXtimer, "F",
                 "with --evict-slow-nodes, the least share of the job's step time the\nslow node costs (default 0.2)",
                 [](Parser& p, Arg f, Arg v) {
                   p.evict_threshold_given = true;
                   if (ParseDouble(v, &p.o->evict_slow_cost) && p.o->evict_slow_cost > 0 && p.o->evict_slow_cost <= 1)
                     return true;
                   return p.Fail(f + " takes a share of the step time above 0 and at most 1 (0.2 is 20%), not '" + v +
                                 "'");
                 }},
                {"--evict-slow-after", nullptr, A::kValue, G::kXtimer, "S",
                 "with --evict-slow-nodes, how long the node must be named slow (default 10)",
                 [](Parser& p, Arg f, Arg v) {
                   p.evict_threshold_given = true;
                   if (ParseDouble(v, &p.o->evict_slow_after_s) && p.o->evict_slow_after_s > 0) return true;
                   return p.Fail(f + " takes seconds (a number > 0), not '" + v + "'");
                 }},
};

// The flag named `name` (dashed) or by its short alias; nullptr when none is.
const FlagSpec* FindFlag(const std::string& name) {
  for (const FlagSpec& f : kFlags)
    if (name == f.name || (f.alias != nullptr && name == f.alias)) return &f;
  return nullptr;
}

// "--nproc-per-node" -> "PET_NPROC_PER_NODE", the variable torchrun (and dlrover-run) read a
// flag's default from.
std::string PetName(const std::string& flag) {
  std::string out = "PET_";
  for (char c : flag.substr(2)) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A flag and its value as the usage writes them: "-m, --module", "--nnodes N|MIN:MAX",
// "--save-at-breakpoint[=0|1]", "--box-pairs P [P ...]".
std::string Synopsis(const FlagSpec& f) {
  std::string out = f.alias != nullptr ? std::string(f.alias) + ", " + f.name : std::string(f.name);
  if (f.arity == Arity::kOptional) return out + "[=" + f.value + "]";
  if (*f.value != '\0') out += std::string(" ") + f.value;
  return out;
}

// One group's lines: the synopsis in a column of 26, the help beside it (a longer synopsis: the
// help after one space), each continuation line under the first.
std::string UsageLines(Group group) {
  constexpr size_t kColumn = 26;
  std::string out;
  for (const FlagSpec& f : kFlags) {
    if (f.group != group) continue;
    std::string line = "  " + Synopsis(f);
    line += line.size() < kColumn + 2 ? std::string(kColumn + 2 - line.size(), ' ') : std::string(" ");
    for (const char* c = f.help; *c != '\0'; ++c)
      line += *c == '\n' ? "\n" + std::string(kColumn + 2, ' ') : std::string(1, *c);
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::vector<std::string> RunFlagNames() {
  std::vector<std::string> names;
  for (const FlagSpec& f : kFlags) names.push_back(f.name);
  return names;
}

std::string RunUsage() {
  // dlrover-run's flags without effect here, on lines of at most 100 characters.
  std::string ignored = "  accepted with a warning, no effect here:";
  size_t line_start = 0;
  for (const FlagSpec& f : kFlags) {
    if (f.group != Group::kDlroverIgnored) continue;
    if (ignored.size() - line_start + Synopsis(f).size() + 2 > 100) {
      ignored += "\n ";
      line_start = ignored.size() - 2;
    }
    ignored += " " + Synopsis(f) + ",";
  }
  ignored.back() = '\n';
  return "usage: xtimer_run [torchrun options] [dlrover-run options] [xtimer options] SCRIPT [ARGS...]\n"
         "Starts and watches this node's training workers like torchrun, under xtimer (timing, hang\n"
         "detection and stacks, flash checkpoint saver), and restarts every node's workers together\n"
         "when one fails or hangs. One xtimer_run per node. Every option is also read from PET_<OPTION>\n"
         "(PET_NPROC_PER_NODE=8, PET_NETWORK_CHECK=1) when not on the command line, as torchrun does.\n"
         "Options take their value as --flag VALUE or --flag=VALUE.\n"
         "torchrun options (--a-b and --a_b both work):\n" +
         UsageLines(Group::kTorchrun) + "dlrover-run options:\n" + UsageLines(Group::kDlrover) + ignored +
         "xtimer options:\n" + UsageLines(Group::kXtimer) +
         "examples:\n"
         "  xtimer_run --standalone --nproc-per-node 8 train.py --epochs 3\n"
         "  xtimer_run --nnodes 2:4 --nproc-per-node 8 --max-restarts 3 --rdzv-backend etcd \\\n"
         "             --rdzv-endpoint etcd:2379 --rdzv-id job1 train.py\n";
}

bool ParseRunOptions(int argc, char** argv, RunOptions* o, std::string* error, bool* help) {
  *help = false;
  Parser p;
  p.o = o;
  p.error = error;
  std::set<const FlagSpec*> given;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the script
    if (arg == "-h" || arg == "--help") return (*help = true), true;
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);  // --flag=value
      value = arg.substr(eq + 1);
      has_value = true;
    } else if (const FlagSpec* f = arg.size() > 2 && arg[1] != '-' ? FindFlag(arg.substr(0, 2)) : nullptr;
               f != nullptr && f->arity == Arity::kValue) {
      name = arg.substr(0, 2);  // -r3, -t2
      value = arg.substr(2);
      has_value = true;
    }
    const FlagSpec* f = FindFlag(Dashed(name));
    if (f == nullptr)
      return p.Fail("unknown option " + arg +
                    " (xtimer_run --help lists them; put the script's own options after the script)");
    given.insert(f);
    name = f->name;
    switch (f->arity) {
      case Arity::kSwitch:
        if (has_value) return p.Fail(name + " is a switch and takes no value ('" + arg + "')");
        value = "1";
        break;
      case Arity::kOptional: break;
      case Arity::kValue:
        if (!has_value) {
          if (i + 1 >= argc) return p.Fail(name + " needs a value");
          value = argv[++i];
        }
        break;
      case Arity::kPairs:
        if (!has_value) {
          for (; i + 1 < argc && IsPair(argv[i + 1]); ++i)
            value += (value.empty() ? "" : " ") + std::string(argv[i + 1]);
        }
        if (value.empty()) return p.Fail(name + " needs one or more socket pairs such as 0:1 2:4");
        break;
    }
    if (!f->set(p, name, value)) return false;
  }
  for (; i < argc; ++i) o->script.push_back(argv[i]);

  // A flag not on the command line takes its value from PET_<FLAG>, as under torchrun.
  for (const FlagSpec& f : kFlags) {
    if (given.count(&f)) continue;
    const std::string name = f.name, pet = PetName(name);
    const char* raw = std::getenv(pet.c_str());
    if (raw == nullptr || *raw == '\0') continue;
    std::string value = raw;
    if (f.arity == Arity::kSwitch) {
      long long on = 0;
      if (!ParseInt(value, 0, 1 << 30, &on)) return p.Fail(pet + "=" + value + ": takes 1 or 0 (" + name + ")");
      value = on ? "1" : "0";
    }
    if (f.arity == Arity::kPairs) {
      std::stringstream in(value);
      std::string item;
      while (in >> item)
        if (!IsPair(item)) return p.Fail(pet + "=" + value + ": takes socket pairs such as 0:1 2:4 (" + name + ")");
    }
    if (!f.set(p, name, value)) return p.Fail(pet + ": " + *error);
  }

  if (o->script.empty()) return (*error = "no training script given (xtimer_run [options] SCRIPT [ARGS...])"), false;
  // --run-path runs the script with Python whatever --no-python and -m say (torchrun's precedence).
  if (o->module && o->no_python && !o->run_path)
    return (*error = "-m/--module and --no-python cannot be used together"), false;
  if (o->auto_config) {
    // dlrover-run's --auto-config: the job's node count from NODE_NUM, one worker per GPU. The
    // flags given on the command line win.
    std::string said;
    if (const char* n = std::getenv("NODE_NUM"); !p.nnodes_given && n != nullptr && *n != '\0') {
      int nodes = 0;
      if (!ToInt("NODE_NUM (read by --auto-config)", n, 1, 1 << 20, &nodes, error)) return false;
      o->min_nodes = o->max_nodes = nodes;
      said += std::to_string(nodes) + " node(s) from NODE_NUM";
    }
    if (int gpus = VisibleGpuCount(); !p.nproc_given && gpus > 0) {
      o->nproc_per_node = gpus;
      said += std::string(said.empty() ? "" : ", ") + std::to_string(gpus) + " worker(s) per node, one per GPU";
    }
    o->notes.push_back("--auto-config: " + (said.empty() ? std::string("nothing to set (no NODE_NUM, no GPU, or "
                                                                       "--nnodes/--nproc-per-node given)")
                                                         : said));
  }
  if (o->standalone) {
    if (o->max_nodes != 1 || (p.rdzv_given && o->rdzv_backend == "etcd"))
      return (*error = "--standalone runs one node: drop --nnodes and --rdzv-* or drop --standalone"), false;
    o->rdzv_backend = "static";
  }
  if (o->elastic()) {
    if (o->rdzv_endpoint.empty())
      return (*error = "--rdzv-backend etcd needs --rdzv-endpoint HOST:PORT of an etcd v3 server"), false;
    if (o->rdzv_id == "none")
      return (*error = "--rdzv-backend etcd needs --rdzv-id: a name every node of this job shares"), false;
  } else {
    if (o->min_nodes != o->max_nodes)
      return (*error = "--nnodes MIN:MAX (elastic) needs --rdzv-backend etcd and --rdzv-endpoint"), false;
    if (o->node_rank >= o->max_nodes)
      return (*error = "--node-rank " + std::to_string(o->node_rank) + " is not below --nnodes " +
                       std::to_string(o->max_nodes)),
             false;
    if (!o->rdzv_endpoint.empty() && !o->master_port_given) {
      // torchrun's static backend takes the master from the endpoint.
      size_t colon = o->rdzv_endpoint.rfind(':');
      o->master_addr = o->rdzv_endpoint.substr(0, colon);
      if (colon != std::string::npos &&
          !ToInt("--rdzv-endpoint", o->rdzv_endpoint.substr(colon + 1), 1, 65535, &o->master_port, error))
        return false;
      o->master_port_given = true;
    }
  }
  // dlrover-run's levels: 1 adds the network check, 2 also the collective's bandwidth. The check
  // between nodes needs the store (below); with a static rendezvous only this node's GPUs are
  // checked, said once.
  const bool several_static = !o->elastic() && o->max_nodes > 1;
  if (o->precheck >= 2) o->comm_perf_test = true;
  if (o->precheck >= 1 && o->elastic()) o->network_check = true;
  if (o->precheck >= 1 && several_static)
    o->notes.push_back("--precheck " + std::to_string(o->precheck) +
                       ": the network check between nodes needs --rdzv-backend etcd; this node checks its GPUs only");
  if (o->auto_config && o->elastic() && o->min_nodes >= 4 && !o->network_check) {
    o->network_check = true;  // as dlrover-run does from 4 nodes on
    o->notes.push_back("--auto-config: " + std::to_string(o->min_nodes) + " nodes or more: --network-check on");
  }
  if (o->node_unit > 1) {
    // A round has a multiple of --node-unit nodes, at least MIN and at most MAX: such a size must exist.
    const int smallest = (o->min_nodes + o->node_unit - 1) / o->node_unit * o->node_unit;
    if (smallest > o->max_nodes)
      return (*error = "--node-unit " + std::to_string(o->node_unit) + " with --nnodes " +
                       std::to_string(o->min_nodes) +
                       (o->min_nodes == o->max_nodes ? "" : ":" + std::to_string(o->max_nodes)) + ": no multiple of " +
                       std::to_string(o->node_unit) + " nodes lies between MIN and MAX"),
             false;
  }
  if (o->exclude_straggler && !o->network_check) return (*error = "--exclude-straggler needs --network-check"), false;
  // The nodes must agree on who is left out, which needs the store: refused rather than ignored,
  // so that a user who asks for the check never believes it ran. One node alone: nothing to probe.
  if (o->network_check && several_static)
    return (*error =
                "--network-check with several nodes needs --rdzv-backend etcd (the nodes agree there on "
                "who is left out); with a static rendezvous run xtimer_netprobe on every node first"),
           false;
  // As the network check: the nodes agree on who leaves through the store.
  if (o->evict_slow_nodes && several_static)
    return (*error =
                "--evict-slow-nodes with several nodes needs --rdzv-backend etcd (an evicted node is left out "
                "there, and a spare takes its place)"),
           false;
  if (o->evict_slow_nodes && !o->elastic())
    p.NoEffect("--evict-slow-nodes", "one node has nowhere to go on without itself: ignored");
  if (!o->evict_slow_nodes && p.evict_threshold_given)
    p.NoEffect("--evict-slow-cost, --evict-slow-after", "thresholds of --evict-slow-nodes, which is off: ignored");
  if (o->min_bandwidth_mbps > 0 && !o->network_check)
    p.NoEffect("--min-bandwidth", "the network check's floor, and the network check is off (--network-check): ignored");
  return true;
}

std::vector<std::string> WorkerCommand(const RunOptions& o) {
  if (o.no_python && !o.run_path) return o.script;
  std::string python = env::String("XTIMER_PYTHON");
  std::vector<std::string> cmd = {python, "-u"};
  if (o.module && !o.run_path) cmd.push_back("-m");
  cmd.insert(cmd.end(), o.script.begin(), o.script.end());
  return cmd;
}

}  // namespace xtimer::run

#include "launcher/run/run_options.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
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
  kSwitch,    // --flag (from PET_FLAG: 1 or 0); the handler gets "1" or "0"
  kOptional,  // --flag or --flag=V; the handler gets V or ""
  kValue,     // --flag V or --flag=V
  kPairs,     // --flag P [P ...]: the arguments that follow while they look like N:M (space-joined)
};

struct Flag {
  Arity arity;
  std::function<bool(const std::string& flag, const std::string& value)> apply;
};

// "--nproc-per-node" -> "PET_NPROC_PER_NODE", the variable torchrun (and dlrover-run) read a
// flag's default from.
std::string PetName(const std::string& flag) {
  std::string out = "PET_";
  for (char c : flag.substr(2)) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string RunUsage() {
  return "usage: xtimer_run [torchrun options] [dlrover-run options] [xtimer options] SCRIPT [ARGS...]\n"
         "Starts and watches this node's training workers like torchrun, under xtimer (timing, hang\n"
         "detection and stacks, flash checkpoint saver), and restarts every node's workers together\n"
         "when one fails or hangs. One xtimer_run per node. Every option is also read from PET_<OPTION>\n"
         "(PET_NPROC_PER_NODE=8, PET_NETWORK_CHECK=1) when not on the command line, as torchrun does.\n"
         "torchrun options (--a-b and --a_b both work):\n"
         "  --nnodes N|MIN:MAX        nodes (default 1; MIN:MAX needs --rdzv-backend etcd)\n"
         "  --nproc-per-node N        workers on this node (or cpu, gpu, auto; default 1)\n"
         "  --max-restarts K          restarts of the worker group before giving up (default 0)\n"
         "  --node-unit N             (dlrover-run) rounds have a multiple of N nodes; extra nodes wait (default 1)\n"
         "  --rdzv-backend static|etcd, --rdzv-endpoint HOST:PORT, --rdzv-id ID\n"
         "  --rdzv-conf join_timeout=S,last_call_timeout=S,lease_ttl=S  (600, 30, 10)\n"
         "  --standalone              one node, no rendezvous server, a free port\n"
         "  --node-rank R, --master-addr A, --master-port P   (static rendezvous)\n"
         "  --local-addr A            how other nodes reach this one (default: the host name)\n"
         "  --monitor-interval S      how often workers are checked (default 0.1)\n"
         "  --no-python, -m/--module, --role NAME, --log-dir DIR, -r/--redirects N, -t/--tee N\n"
         "  --run-path                run the script with Python (over --no-python and -m)\n"
         "  --local-ranks-filter R,R  only these local ranks' output on the terminal (files keep all)\n"
         "  --start-method spawn|fork|forkserver  accepted; workers are always their own processes\n"
         "  --logs-specs NAME         accepted, no effect (a Python plugin of torchrun)\n"
         "dlrover-run options:\n"
         "  --network-check           probe the round's nodes before its workers start; faulty nodes leave\n"
         "                            (etcd rendezvous; XTIMER_NETCHECK_SIZE / _TIMEOUT, default 3M / 4 s)\n"
         "  --exclude-straggler       with --network-check, stragglers leave too\n"
         "  --min-bandwidth MB/s      with --network-check, a node slower than this is faulty\n"
         "  --precheck 0|1|2          1: a matmul on each GPU and an allreduce over them before this node\n"
         "                            joins (a node that fails does not join), and --network-check with\n"
         "                            etcd; 2: also --comm-perf-test (default 0)\n"
         "  --comm-perf-test          measure the round's allreduce bandwidth before training; print a table\n"
         "  --numa-affinity           bind each worker to the CPUs of its GPU's NUMA node\n"
         "  --auto-config             nodes from NODE_NUM, workers per node from the GPUs (flags given win)\n"
         "  --save-at-breakpoint[=0|1] persist the newest memory checkpoint when a worker fails (default 1)\n"
         "  --accelerator nvidia.com/gpu|ascend-npu|mthreads.com/gpu  (xtimer times NVIDIA GPUs)\n"
         "  accepted with a warning, no effect here: --auto-tunning, --training-port P, --switchbox-check,\n"
         "  --box-pairs P [P ...], --min-channels N, --ucp-device-type T\n"
         "xtimer options:\n"
         "  --stop-grace S            seconds between SIGTERM and SIGKILL when stopping workers (default 5)\n"
         "examples:\n"
         "  xtimer_run --standalone --nproc-per-node 8 train.py --epochs 3\n"
         "  xtimer_run --nnodes 2:4 --nproc-per-node 8 --max-restarts 3 --rdzv-backend etcd \\\n"
         "             --rdzv-endpoint etcd:2379 --rdzv-id job1 train.py\n";
}

bool ParseRunOptions(int argc, char** argv, RunOptions* o, std::string* error, bool* help) {
  *help = false;
  bool nnodes_given = false, nproc_given = false, rdzv_given = false;
  std::set<std::string> warned;
  // A flag that has no effect here: one line, once, saying why.
  auto no_effect = [&](const std::string& flag, const std::string& why) {
    if (warned.insert(flag).second) o->warnings.push_back(flag + ": " + why);
    return true;
  };
  auto flag_int = [&](int* target, long long lo, long long hi) {
    return [=](const std::string& f, const std::string& v) { return ToInt(f, v, lo, hi, target, error); };
  };
  auto flag_switch = [&](bool* target) {
    return [=](const std::string&, const std::string& v) { return *target = v == "1", true; };
  };
  auto flag_string = [&](std::string* target) {
    return [=](const std::string&, const std::string& v) { return *target = v, true; };
  };
  // A file or folder: a value that starts with "--" is the next option taken as the path by
  // mistake (`--log-dir --no-python` made a folder named --no-python), never a path.
  auto flag_path = [&](std::string* target, const char* kind) {
    return [=](const std::string& f, const std::string& v) {
      if (v.rfind("--", 0) == 0)
        return (*error = f + " needs a " + kind + ", not the option '" + v + "' (a " + kind +
                         " whose name starts with -- is written ./" + v + ")"),
               false;
      return *target = v, true;
    };
  };
  using A = Arity;
  std::map<std::string, Flag> flags = {
      // torchrun's.
      {"--nnodes", {A::kValue, [&](auto&, auto& v) { return nnodes_given = true, ParseNnodes(v, o, error); }}},
      {"--nproc-per-node", {A::kValue, [&](auto&, auto& v) { return nproc_given = true, ParseNproc(v, o, error); }}},
      {"--max-restarts", {A::kValue, flag_int(&o->max_restarts, 0, 1 << 30)}},
      {"--node-unit", {A::kValue, flag_int(&o->node_unit, 1, 1 << 20)}},
      {"--rdzv-backend",
       {A::kValue,
        [&](auto&, auto& v) {
          rdzv_given = true;
          if (v == "etcd" || v == "etcd-v2") return o->rdzv_backend = "etcd", true;
          if (v == "static") return o->rdzv_backend = v, true;
          *error = "--rdzv-backend " + v +
                   " is not supported by xtimer_run: use static (fixed nodes) or etcd "
                   "(elastic, with --rdzv-endpoint HOST:PORT of an etcd v3)";
          return false;
        }}},
      {"--rdzv-endpoint", {A::kValue, [&](auto&, auto& v) { return rdzv_given = true, o->rdzv_endpoint = v, true; }}},
      {"--rdzv-id", {A::kValue, flag_string(&o->rdzv_id)}},
      {"--rdzv-conf", {A::kValue, [&](auto&, auto& v) { return ParseRdzvConf(v, o, error); }}},
      {"--node-rank", {A::kValue, flag_int(&o->node_rank, 0, 1 << 20)}},
      {"--master-addr", {A::kValue, flag_string(&o->master_addr)}},
      {"--master-port",
       {A::kValue,
        [&](auto& f, auto& v) { return o->master_port_given = true, ToInt(f, v, 1, 65535, &o->master_port, error); }}},
      {"--monitor-interval",
       {A::kValue,
        [&](auto& f, auto& v) {
          if (!ToSeconds(f, v, &o->monitor_interval_s, error)) return false;
          if (o->monitor_interval_s < 0.01) o->monitor_interval_s = 0.01;
          return true;
        }}},
      {"--local-addr", {A::kValue, flag_string(&o->local_addr)}},
      {"--role", {A::kValue, flag_string(&o->role)}},
      {"--log-dir", {A::kValue, flag_path(&o->log_dir, "folder")}},
      {"--redirects", {A::kValue, [&](auto& f, auto& v) { return ParseStreams(f, v, &o->redirects, error); }}},
      {"--tee", {A::kValue, [&](auto& f, auto& v) { return ParseStreams(f, v, &o->tee, error); }}},
      {"--standalone", {A::kSwitch, flag_switch(&o->standalone)}},
      {"--module", {A::kSwitch, flag_switch(&o->module)}},
      {"--no-python", {A::kSwitch, flag_switch(&o->no_python)}},
      {"--run-path", {A::kSwitch, flag_switch(&o->run_path)}},
      {"--local-ranks-filter", {A::kValue, [&](auto& f, auto& v) { return ParseRanksFilter(f, v, o, error); }}},
      // Our workers are always processes of their own, which is what torchrun's methods give a script.
      {"--start-method",
       {A::kValue,
        [&](auto& f, auto& v) {
          if (v == "spawn" || v == "fork" || v == "forkserver") return true;
          return (*error = f + " takes spawn, fork or forkserver, not '" + v + "'"), false;
        }}},
      {"--logs-specs",
       {A::kValue,
        [&](auto& f, auto&) {
          return no_effect(f,
                           "names a Python LogsSpecs plugin of torchrun; xtimer_run writes --log-dir in torchrun's "
                           "default layout itself: ignored");
        }}},
      // dlrover-run's.
      {"--network-check", {A::kSwitch, flag_switch(&o->network_check)}},
      {"--exclude-straggler", {A::kSwitch, flag_switch(&o->exclude_straggler)}},
      {"--save-at-breakpoint",
       {A::kOptional,
        [&](auto&, auto& v) {
          if (v != "" && v != "0" && v != "1")
            return (*error = "--save-at-breakpoint takes 0 or 1, not '" + v + "'"), false;
          return o->save_at_breakpoint = v != "0", true;
        }}},
      {"--precheck", {A::kValue, flag_int(&o->precheck, 0, 2)}},
      {"--comm-perf-test", {A::kSwitch, flag_switch(&o->comm_perf_test)}},
      {"--numa-affinity", {A::kSwitch, flag_switch(&o->numa_affinity)}},
      {"--auto-config", {A::kSwitch, flag_switch(&o->auto_config)}},
      {"--min-bandwidth",
       {A::kValue,
        [&](auto& f, auto& v) {
          if (ParseDouble(v, &o->min_bandwidth_mbps) && o->min_bandwidth_mbps >= 0) return true;
          return (*error = f + " takes MB/s (a number >= 0), not '" + v + "'"), false;
        }}},
      {"--accelerator",
       {A::kValue,
        [&](auto& f, auto& v) {
          if (v == "nvidia.com/gpu") return true;
          if (v == "ascend-npu" || v == "mthreads.com/gpu")
            return no_effect(f, "xtimer times NVIDIA GPUs (CUDA, NCCL); on " + v +
                                    " the workers run, untimed, and the GPU checks find no GPU");
          return (*error = f + " takes nvidia.com/gpu, ascend-npu or mthreads.com/gpu, not '" + v + "'"), false;
        }}},
      {"--auto-tunning",
       {A::kSwitch,
        [&](auto& f, auto& v) {
          return v != "1" || no_effect(f,
                                       "DLRover's job master tunes the batch size and learning rate of a running "
                                       "job; xtimer_run has no job master: ignored");
        }}},
      {"--training-port",
       {A::kValue,
        [&](auto& f, auto& v) {
          int port = 0;
          return ToInt(f, v, 1, 65535, &port, error) &&
                 no_effect(f, "DLRover gives it to Ascend's HCCL as its first port; NCCL does not use it: ignored");
        }}},
      {"--switchbox-check",
       {A::kSwitch,
        [&](auto& f, auto& v) {
          return v != "1" ||
                 no_effect(f,
                           "checks the links between a MetaX machine's GPUs and its switchbox, and xtimer knows no "
                           "switchbox to check: ignored (--network-check still runs)");
        }}},
      {"--box-pairs",
       {A::kPairs,
        [&](auto& f, auto&) { return no_effect(f, "pairs the switchbox's sockets for --switchbox-check: ignored"); }}},
      {"--min-channels",
       {A::kValue,
        [&](auto& f, auto& v) {
          int n = 0;
          return ToInt(f, v, 0, 1 << 20, &n, error) &&
                 no_effect(f, "the switchbox channels --switchbox-check needs working: ignored");
        }}},
      {"--ucp-device-type",
       {A::kValue,
        [&](auto& f, auto&) {
          return no_effect(f,
                           "where DLRover converts DeepSpeed universal checkpoints; xtimer's checkpoints need no "
                           "conversion: ignored");
        }}},
      // Ours.
      {"--stop-grace", {A::kValue, [&](auto& f, auto& v) { return ToSeconds(f, v, &o->stop_grace_s, error); }}},
  };
  const std::map<std::string, std::string> short_names = {{"-m", "--module"}, {"-r", "--redirects"}, {"-t", "--tee"}};

  std::set<std::string> given;
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
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    } else if (arg.size() > 2 && arg[1] != '-' && short_names.count(arg.substr(0, 2)) && arg[1] != 'm') {
      name = arg.substr(0, 2);  // -r3, -t2
      value = arg.substr(2);
      has_value = true;
    }
    name = Dashed(name);
    if (auto s = short_names.find(name); s != short_names.end()) name = s->second;
    auto f = flags.find(name);
    if (f == flags.end()) {
      *error =
          "unknown option " + arg + " (xtimer_run --help lists them; put the script's own options after the script)";
      return false;
    }
    given.insert(name);
    switch (f->second.arity) {
      case Arity::kSwitch:
        if (has_value) return (*error = name + " is a switch and takes no value ('" + arg + "')"), false;
        value = "1";
        break;
      case Arity::kOptional: break;
      case Arity::kValue:
        if (!has_value) {
          if (i + 1 >= argc) return (*error = name + " needs a value"), false;
          value = argv[++i];
        }
        break;
      case Arity::kPairs:
        if (!has_value) {
          for (; i + 1 < argc && IsPair(argv[i + 1]); ++i)
            value += (value.empty() ? "" : " ") + std::string(argv[i + 1]);
        }
        if (value.empty()) return (*error = name + " needs one or more socket pairs such as 0:1 2:4"), false;
        break;
    }
    if (!f->second.apply(name, value)) return false;
  }
  for (; i < argc; ++i) o->script.push_back(argv[i]);

  // A flag not on the command line takes its value from PET_<FLAG>, as under torchrun.
  for (const auto& [name, flag] : flags) {
    if (given.count(name)) continue;
    std::string pet = PetName(name);
    const char* raw = std::getenv(pet.c_str());
    if (raw == nullptr || *raw == '\0') continue;
    std::string value = raw;
    if (flag.arity == Arity::kSwitch) {
      long long on = 0;
      if (!ParseInt(value, 0, 1 << 30, &on))
        return (*error = pet + "=" + value + ": takes 1 or 0 (" + name + ")"), false;
      value = on ? "1" : "0";
    }
    if (flag.arity == Arity::kPairs) {
      std::stringstream in(value);
      std::string item;
      while (in >> item)
        if (!IsPair(item))
          return (*error = pet + "=" + value + ": takes socket pairs such as 0:1 2:4 (" + name + ")"), false;
    }
    if (!flag.apply(name, value)) return (*error = pet + ": " + *error), false;
  }

  if (o->script.empty()) return (*error = "no training script given (xtimer_run [options] SCRIPT [ARGS...])"), false;
  // --run-path runs the script with Python whatever --no-python and -m say (torchrun's precedence).
  if (o->module && o->no_python && !o->run_path)
    return (*error = "-m/--module and --no-python cannot be used together"), false;
  if (o->auto_config) {
    // dlrover-run's --auto-config: the job's node count from NODE_NUM, one worker per GPU. The
    // flags given on the command line win.
    std::string said;
    if (const char* n = std::getenv("NODE_NUM"); !nnodes_given && n != nullptr && *n != '\0') {
      int nodes = 0;
      if (!ToInt("NODE_NUM (read by --auto-config)", n, 1, 1 << 20, &nodes, error)) return false;
      o->min_nodes = o->max_nodes = nodes;
      said += std::to_string(nodes) + " node(s) from NODE_NUM";
    }
    if (int gpus = VisibleGpuCount(); !nproc_given && gpus > 0) {
      o->nproc_per_node = gpus;
      said += std::string(said.empty() ? "" : ", ") + std::to_string(gpus) + " worker(s) per node, one per GPU";
    }
    o->notes.push_back("--auto-config: " + (said.empty() ? std::string("nothing to set (no NODE_NUM, no GPU, or "
                                                                       "--nnodes/--nproc-per-node given)")
                                                         : said));
  }
  if (o->standalone) {
    if (o->max_nodes != 1 || (rdzv_given && o->rdzv_backend == "etcd"))
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
  if (o->min_bandwidth_mbps > 0 && !o->network_check)
    no_effect("--min-bandwidth", "the network check's floor, and the network check is off (--network-check): ignored");
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

#include "launcher/run/run_options.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

#include "common/env.h"
#include "common/parse_number.h"

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

bool ParseNproc(const std::string& v, RunOptions* o, std::string* error) {
  if (v == "cpu") {
    o->nproc_per_node = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    return true;
  }
  if (v == "gpu" || v == "auto") {
    // One per visible GPU; without a GPU list (or without GPUs) one, as torchrun's auto on CPU.
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    int n = 1;
    if (visible != nullptr && *visible != '\0') {
      n = 1;
      for (const char* p = visible; *p; ++p) n += *p == ',';
    }
    o->nproc_per_node = n;
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

}  // namespace

std::string RunUsage() {
  return "usage: xtimer_run [torchrun options] [xtimer options] SCRIPT [ARGS...]\n"
         "Starts and watches this node's training workers like torchrun, under xtimer (timing, hang\n"
         "detection and stacks, flash checkpoint saver), and restarts every node's workers together\n"
         "when one fails or hangs. One xtimer_run per node.\n"
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
         "xtimer options:\n"
         "  --network-check           probe the round's nodes before its workers start; faulty nodes leave\n"
         "                            (etcd rendezvous; XTIMER_NETCHECK_SIZE / _TIMEOUT, default 3M / 4 s)\n"
         "  --exclude-straggler       with --network-check, stragglers leave too\n"
         "  --save-at-breakpoint[=0|1] persist the newest memory checkpoint when a worker fails (default 1)\n"
         "  --stop-grace S            seconds between SIGTERM and SIGKILL when stopping workers (default 5)\n"
         "examples:\n"
         "  xtimer_run --standalone --nproc-per-node 8 train.py --epochs 3\n"
         "  xtimer_run --nnodes 2:4 --nproc-per-node 8 --max-restarts 3 --rdzv-backend etcd \\\n"
         "             --rdzv-endpoint etcd:2379 --rdzv-id job1 train.py\n";
}

bool ParseRunOptions(int argc, char** argv, RunOptions* o, std::string* error, bool* help) {
  *help = false;
  bool nnodes_given = false, rdzv_given = false;
  // Flags that take a value: the handler gets it.
  using Handler = std::function<bool(const std::string&, const std::string&)>;
  std::map<std::string, Handler> with_value = {
      {"--nnodes", [&](auto&, auto& v) { return nnodes_given = true, ParseNnodes(v, o, error); }},
      {"--nproc-per-node", [&](auto&, auto& v) { return ParseNproc(v, o, error); }},
      {"--max-restarts", [&](auto& f, auto& v) { return ToInt(f, v, 0, 1 << 30, &o->max_restarts, error); }},
      {"--node-unit", [&](auto& f, auto& v) { return ToInt(f, v, 1, 1 << 20, &o->node_unit, error); }},
      {"--rdzv-backend",
       [&](auto&, auto& v) {
         rdzv_given = true;
         if (v == "etcd" || v == "etcd-v2") return o->rdzv_backend = "etcd", true;
         if (v == "static") return o->rdzv_backend = v, true;
         *error = "--rdzv-backend " + v +
                  " is not supported by xtimer_run: use static (fixed nodes) or etcd "
                  "(elastic, with --rdzv-endpoint HOST:PORT of an etcd v3)";
         return false;
       }},
      {"--rdzv-endpoint", [&](auto&, auto& v) { return rdzv_given = true, o->rdzv_endpoint = v, true; }},
      {"--rdzv-id", [&](auto&, auto& v) { return o->rdzv_id = v, true; }},
      {"--rdzv-conf", [&](auto&, auto& v) { return ParseRdzvConf(v, o, error); }},
      {"--node-rank", [&](auto& f, auto& v) { return ToInt(f, v, 0, 1 << 20, &o->node_rank, error); }},
      {"--master-addr", [&](auto&, auto& v) { return o->master_addr = v, true; }},
      {"--master-port",
       [&](auto& f, auto& v) { return o->master_port_given = true, ToInt(f, v, 1, 65535, &o->master_port, error); }},
      {"--monitor-interval",
       [&](auto& f, auto& v) {
         if (!ToSeconds(f, v, &o->monitor_interval_s, error)) return false;
         if (o->monitor_interval_s < 0.01) o->monitor_interval_s = 0.01;
         return true;
       }},
      {"--local-addr", [&](auto&, auto& v) { return o->local_addr = v, true; }},
      {"--role", [&](auto&, auto& v) { return o->role = v, true; }},
      {"--log-dir", [&](auto&, auto& v) { return o->log_dir = v, true; }},
      {"--redirects", [&](auto& f, auto& v) { return ParseStreams(f, v, &o->redirects, error); }},
      {"--tee", [&](auto& f, auto& v) { return ParseStreams(f, v, &o->tee, error); }},
      {"--stop-grace", [&](auto& f, auto& v) { return ToSeconds(f, v, &o->stop_grace_s, error); }},
      // torchrun's flags that change nothing here.
      {"--start-method", [&](auto&, auto&) { return true; }},
      {"--local-ranks-filter", [&](auto&, auto&) { return true; }},
      {"--run-path", [&](auto&, auto&) { return true; }},
      {"--logs-specs", [&](auto&, auto&) { return true; }},
  };
  std::map<std::string, std::string> short_names = {{"-r", "--redirects"}, {"-t", "--tee"}};

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
    }
    name = Dashed(name);
    if (auto s = short_names.find(name); s != short_names.end()) name = s->second;
    if (name == "-m" || name == "--module") o->module = true;
    else if (name == "--no-python") o->no_python = true;
    else if (name == "--standalone") o->standalone = true;
    else if (name == "--network-check") o->network_check = true;
    else if (name == "--exclude-straggler") o->exclude_straggler = true;
    else if (name == "--save-at-breakpoint") {
      if (has_value && value != "0" && value != "1")
        return (*error = "--save-at-breakpoint takes 0 or 1, not '" + value + "'"), false;
      o->save_at_breakpoint = !has_value || value == "1";
    } else if (auto h = with_value.find(name); h != with_value.end()) {
      if (!has_value) {
        if (i + 1 >= argc) return (*error = name + " needs a value"), false;
        value = argv[++i];
      }
      if (!h->second(name, value)) return false;
    } else {
      *error =
          "unknown option " + arg + " (xtimer_run --help lists them; put the script's own options after the script)";
      return false;
    }
  }
  for (; i < argc; ++i) o->script.push_back(argv[i]);

  if (o->script.empty()) return (*error = "no training script given (xtimer_run [options] SCRIPT [ARGS...])"), false;
  if (o->module && o->no_python) return (*error = "-m/--module and --no-python cannot be used together"), false;
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
  if (o->network_check && !o->elastic() && o->max_nodes > 1)
    return (*error =
                "--network-check with several nodes needs --rdzv-backend etcd (the nodes agree there on "
                "who is left out); with a static rendezvous run xtimer_netprobe on every node first"),
           false;
  (void)nnodes_given;
  return true;
}

std::vector<std::string> WorkerCommand(const RunOptions& o) {
  if (o.no_python) return o.script;
  std::string python = env::String("XTIMER_PYTHON");
  std::vector<std::string> cmd = {python, "-u"};
  if (o.module) cmd.push_back("-m");
  cmd.insert(cmd.end(), o.script.begin(), o.script.end());
  return cmd;
}

}  // namespace xtimer::run

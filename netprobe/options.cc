#include "netprobe/options.h"

#include "common/parse_number.h"

namespace xtimer::netprobe {

const char* Name(Backend b) { return b == Backend::kNccl ? "nccl" : "tcp"; }

const char* Usage() {
  return R"(usage: xtimer_netprobe --rdzv HOST:PORT --nnodes N [--node-rank R] [--backend tcp|nccl]
                       [--rounds auto|1..10] [--size BYTES] [--min-bandwidth MB/s]
                       [--straggler-factor 2.0] [--all-pairs] [--streams 4] [--timeout S]
                       [--connect-timeout S] [--no-early-stop] [--json FILE]
       xtimer_netprobe --serve --rdzv HOST:PORT --nnodes N [judging options]

Pre-flight network check: pairs the nodes, measures bandwidth and latency between them, and
names faulty nodes, bad links and stragglers. Run once per node; node 0 also hosts the
rendezvous when HOST is one of its addresses (or run --serve alone).

  --rdzv HOST:PORT        rendezvous address (control messages only, never probe traffic)
  --nnodes N              number of nodes taking part
  --node-rank R           this node's rank, 0..N-1 (default: assigned in order of arrival)
  --backend tcp|nccl      tcp: parallel TCP streams; nccl: allreduce + send/recv between GPUs
  --rounds auto|K         at most K rounds (auto: as many as it takes to decide, up to 10)
  --size BYTES            bytes per direction per test, suffixes k/M/G (default 64M)
  --streams N             parallel TCP streams per direction (default 4)
  --min-bandwidth MB/s    a node, link or local GPU pair under this fails (default: off)
  --straggler-factor F    a node slower than F x the median is a straggler (default 2.0)
  --all-pairs             test every pair, in n-1 rounds of disjoint pairs
  --timeout S             deadline for joining, every send and wait (XTIMER_NETPROBE_TIMEOUT, 30)
  --connect-timeout S     a test's connections must be up within S (default 4, at most --timeout)
  --no-early-stop         let every test move all its bytes (default: a test clearly slower
                          than the others of its step is stopped and judged from its rate)
  --json FILE             write the report as JSON (docs/formats.md)
  --serve                 run only the rendezvous (judging options apply here)

Exit status: 0 healthy, 1 problems found, 2 the probe itself failed.
)";
}

bool SplitHostPort(const std::string& s, std::string* host, int* port) {
  size_t colon;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    *host = s.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = s.rfind(':');
    if (colon == std::string::npos) return false;
    *host = s.substr(0, colon);
    if (host->find(':') != std::string::npos) return false;  // bare IPv6 needs brackets
  }
  long long p = 0;
  if (host->empty() || !ParseInt(s.substr(colon + 1), 1, 65535, &p)) return false;
  *port = static_cast<int>(p);
  return true;
}

bool ParseSize(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  std::string digits = s;
  int64_t mult = 1;
  switch (s.back()) {
    case 'k':
    case 'K': mult = 1ll << 10; break;
    case 'm':
    case 'M': mult = 1ll << 20; break;
    case 'g':
    case 'G': mult = 1ll << 30; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  long long v = 0;
  if (!ParseInt(digits, 1, (1ll << 40) / mult, &v)) return false;
  *out = v * mult;
  return true;
}

bool ParseOptions(const std::vector<std::string>& args, double default_timeout_s, Options* o, std::string* error) {
  o->timeout_s = default_timeout_s;
  bool have_rdzv = false, have_nnodes = false;
  auto fail = [&](const std::string& msg) {
    *error = msg + " (see --help)";
    return false;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool inline_value = false;
    if (flag.rfind("--", 0) == 0) {
      size_t eq = flag.find('=');
      if (eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        inline_value = true;
      }
    }
    auto need = [&](std::string* v) {
      if (inline_value) return (*v = value), true;
      if (i + 1 >= args.size()) return false;
      *v = args[++i];
      return true;
    };
    auto boolean = [&]() { return !inline_value; };
    std::string v;
    long long n = 0;
    double d = 0;
    if (flag == "--help" || flag == "-h") {
      o->help = true;
    } else if (flag == "--version") {
      o->version = true;
    } else if (flag == "--internal-worker") {
      // Everything after it belongs to the worker.
      o->worker_args.assign(args.begin() + i + 1, args.end());
      return true;
    } else if (flag == "--rdzv") {
      if (!need(&v) || !SplitHostPort(v, &o->rdzv_host, &o->rdzv_port))
        return fail("--rdzv needs HOST:PORT (e.g. 10.0.0.1:29400, [fe80::1]:29400)");
      have_rdzv = true;
    } else if (flag == "--nnodes") {
      if (!need(&v) || !ParseInt(v, 1, 100000, &n))
        return fail("--nnodes needs a node count from 1 to 100000, got '" + v + "'");
      o->nnodes = static_cast<int>(n);
      have_nnodes = true;
    } else if (flag == "--node-rank") {
      if (!need(&v) || !ParseInt(v, 0, 99999, &n))
        return fail("--node-rank needs a rank from 0 to nnodes-1, got '" + v + "'");
      o->node_rank = static_cast<int>(n);
    } else if (flag == "--backend") {
      if (!need(&v) || (v != "tcp" && v != "nccl")) return fail("--backend must be tcp or nccl, got '" + v + "'");
      o->backend = v == "nccl" ? Backend::kNccl : Backend::kTcp;
    } else if (flag == "--rounds") {
      if (!need(&v)) return fail("--rounds needs auto or a number from 1 to 10");
      if (v == "auto") {
        o->max_rounds = 0;
      } else if (ParseInt(v, 1, 10, &n)) {
        o->max_rounds = static_cast<int>(n);
      } else {
        return fail("--rounds needs auto or a number from 1 to 10, got '" + v + "'");
      }
    } else if (flag == "--size") {
      if (!need(&v) || !ParseSize(v, &o->size))
        return fail("--size needs a byte count such as 4194304, 64M or 1G, got '" + v + "'");
    } else if (flag == "--streams") {
      if (!need(&v) || !ParseInt(v, 1, 64, &n)) return fail("--streams needs a number from 1 to 64, got '" + v + "'");
      o->streams = static_cast<int>(n);
    } else if (flag == "--min-bandwidth") {
      if (!need(&v) || !ParseDouble(v, &d) || d <= 0)
        return fail("--min-bandwidth needs a positive figure in MB/s, got '" + v + "'");
      o->min_bandwidth_mbps = d;
    } else if (flag == "--straggler-factor") {
      if (!need(&v) || !ParseDouble(v, &d) || d <= 1.0)
        return fail("--straggler-factor needs a number above 1 (e.g. 2.0), got '" + v + "'");
      o->straggler_factor = d;
    } else if (flag == "--all-pairs") {
      if (!boolean()) return fail("--all-pairs takes no value");
      o->all_pairs = true;
    } else if (flag == "--no-early-stop") {
      if (!boolean()) return fail("--no-early-stop takes no value");
      o->early_stop = false;
    } else if (flag == "--timeout") {
      if (!need(&v) || !ParseDouble(v, &d) || d <= 0 || d > 86400)
        return fail("--timeout needs seconds above 0 (fractions allowed), got '" + v + "'");
      o->timeout_s = d;
    } else if (flag == "--connect-timeout") {
      if (!need(&v) || !ParseDouble(v, &d) || d <= 0 || d > 86400)
        return fail("--connect-timeout needs seconds above 0 (fractions allowed), got '" + v + "'");
      o->connect_timeout_s = d;
    } else if (flag == "--json") {
      if (!need(&v) || v.empty()) return fail("--json needs a file name");
      o->json_path = v;
    } else if (flag == "--serve") {
      if (!boolean()) return fail("--serve takes no value");
      o->serve = true;
    } else {
      return fail("unknown argument '" + args[i] + "'");
    }
  }
  if (o->help || o->version) return true;
  if (!have_rdzv) return fail("--rdzv HOST:PORT is required");
  if (!have_nnodes) return fail("--nnodes N is required");
  if (o->node_rank >= o->nnodes)
    return fail("--node-rank " + std::to_string(o->node_rank) + " is not below --nnodes " + std::to_string(o->nnodes));
  if (o->serve && o->node_rank >= 0) return fail("--serve runs no node; drop --node-rank");
  if (o->backend == Backend::kTcp && o->size < o->streams)
    return fail("--size must be at least one byte per stream (--streams " + std::to_string(o->streams) + ")");
  if (o->backend == Backend::kNccl && o->size < 4)
    return fail("--size must be at least 4 bytes (one float) with --backend nccl");
  return true;
}

}  // namespace xtimer::netprobe

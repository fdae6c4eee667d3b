#include "common/env.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "common/log.h"

namespace xtimer::env {
namespace {

// Keep in the order of docs/config.md. Add a row here before reading a new variable.
constexpr Var kVars[] = {
    // --- general
    {"XTIMER_TIMELINE_PATH", "/tmp/xtimer", "Folder for every file a rank writes: summaries, traces, stack files.",
     "XPU_TIMER_TIMELINE_PATH"},
    {"XTIMER_LOG_LEVEL", "info", "error, warn, info or debug: what the library and tools print on stderr."},
    {"XTIMER_DISABLE", "0", "1 makes the preloaded library pass every call straight through."},
    {"XTIMER_PRELOAD_LIB", "",
     "Path of libxtimer_preload.so for xtimer_launch; default: ../lib/ next to the xtimer_launch binary."},
    // --- timing
    {"XTIMER_REPORT_INTERVAL", "30", "Seconds between summary files (and reports to the agent); 0 = only at exit."},
    {"XTIMER_KERNEL_SAMPLE", "1",
     "Time 1 in N plain kernel launches (1 = all, 0 = none). Matmuls, collectives and p2p are always timed."},
    {"XTIMER_CUPTI", "1",
     "1: time kernels, copies and memsets from CUPTI activity records (every launch path, graph replays included) when "
     "libcupti.so.13 loads and no other CUPTI subscriber exists; 0: event pairs only."},
    {"XTIMER_KERNEL_START_EVENT", "0",
     "Event-pair mode: 1 records a start event before every timed plain kernel too; 0 records only its end and "
     "derives its start from the previous op on its stream and the launch call."},
    {"XTIMER_TRACE", "0", "Keep the last N operations per rank and write them as Chrome trace-event JSON; 0 = off."},
    {"XTIMER_MAX_INFLIGHT", "65536",
     "Timed operations that may be in flight at once per process; beyond it launches go untimed (and are counted)."},
    // --- slowdown signals
    {"XTIMER_STEPS", "1",
     "1: find each rank's training step from its collectives and write one record per step (GPU busy/idle, kernels, "
     "collectives, GC and DataLoader time) to <rank>-<world>.steps.jsonl and the node agent; 0: off."},
    {"XTIMER_PYTHON_HOOKS", "1",
     "1: xtimer_launch/xtimer_run put a sitecustomize on PYTHONPATH that times the rank's GC pauses and DataLoader "
     "waits for the step records; 0: Python is left alone."},
    // --- hang detection
    {"XTIMER_HANG_TIMEOUT", "300",
     "Seconds an operation (or a synchronising call) may run before it is a hang; fractions allowed.",
     "XPU_TIMER_HANG_TIMEOUT"},
    {"XTIMER_HANG_ACTION", "dump",
     "On a hang: dump (write stacks once), abort (dump, then abort the process), log (only log; a collector may still "
     "ask for stacks), restart (dump; xtimer_run then restarts every worker; its default)."},
    {"XTIMER_DUMP_SIGNAL", "SIGUSR2",
     "Signal that makes a rank dump its stacks (name or number; 'none' disables). Installed only if the program has no "
     "handler."},
    {"XTIMER_CAPTURE_SIGNAL", "SIGRTMIN+5", "Real-time signal used internally to interrupt each thread during a dump."},
    // --- node agent and collector
    {"XTIMER_AGENT_SOCKET", "", "Unix socket of the node agent; set by xtimer_launch for every process below it."},
    {"XTIMER_METRICS_PORT", "18889", "Port of the node agent's Prometheus /metrics; 0 = off."},
    {"XTIMER_COLLECTOR", "",
     "host:port of xtimer_collector; empty = the agent runs an embedded collector for its node."},
    {"XTIMER_COLLECTOR_TOKEN_FILE", "", "File holding the token the agent presents to the collector."},
    {"XTIMER_COLLECTOR_CA", "",
     "PEM file of the CA that signed a TLS collector's certificate; set = the agent uses TLS."},
    {"XTIMER_DUMP_WAIT", "30", "Seconds the collector waits for every rank's stacks after a hang before merging."},
    {"XTIMER_NODE_NAME", "",
     "The name the node agent (and each rank, in its steps file) gives its node in step records, slowdown.json and "
     "/metrics; default: the host name."},
    // --- slowdown judgement
    {"XTIMER_SLOW_WINDOW", "5", "Seconds of steps each slowdown evaluation looks at (at least 3 steps per rank)."},
    {"XTIMER_SLOW_INTERVAL", "2", "Seconds between slowdown evaluations (each rewrites slowdown.json)."},
    {"XTIMER_SLOW_THRESHOLD", "0.85",
     "A rank, node or link whose rate falls below this fraction of its peers' (or the job below its best) is slow."},
    {"XTIMER_SLOW_BASELINE", "300", "Seconds back the judge looks for the job's (and each communicator's) best."},
    {"XTIMER_SLOW_SAMPLE", "10",
     "Seconds of Python stack samples (50 Hz) asked of a rank suspected of a host-side slowdown; 0 = never."},
    // --- elastic launcher
    {"XTIMER_PYTHON", "python3",
     "Python interpreter xtimer_run starts the training script with (without --no-python); looked up on PATH."},
    {"XTIMER_WARM_START", "1",
     "1: xtimer_run keeps a warm Python interpreter per local rank (torch imported) and starts a restarted worker "
     "in it; 0: every worker is a fresh process."},
    {"XTIMER_WARM_DELAY", "10",
     "Seconds a round's workers run before xtimer_run starts the warm interpreters for the next round (their "
     "imports then do not compete with the workers' own start)."},
    {"XTIMER_WARM_IMPORTS", "",
     "Modules a warm interpreter imports besides torch and torch._dynamo, comma-separated (none may touch CUDA or "
     "NCCL at import)."},
    {"XTIMER_WARM_FD", "", "Set by xtimer_run in a warm interpreter: the descriptor of its hand-over socket."},
    {"XTIMER_RANK_PID", "",
     "Set by a warm interpreter's hand-over: the rank's pid, so that the processes it starts know they are not it."},
    {"XTIMER_GPU_CHECK_TIMEOUT", "60",
     "Deadline in seconds of xtimer_run --precheck's GPU check and of --comm-perf-test; what is not done by then is "
     "killed."},
    {"XTIMER_SYSFS_ROOT", "/sys",
     "Where xtimer_run reads the PCI devices and NUMA nodes (--numa-affinity, --auto-config); tests point it at a fake "
     "tree."},
    // --- network check
    {"XTIMER_NETPROBE_TIMEOUT", "30",
     "Deadline in seconds for xtimer_netprobe's join window and every send and wait (a test's connects: "
     "--connect-timeout, 4 s)."},
    {"XTIMER_NETCHECK_SIZE", "3M", "Bytes per direction per test of xtimer_run --network-check (suffixes k, M, G)."},
    {"XTIMER_NETCHECK_TIMEOUT", "4",
     "Deadline in seconds for every connect, send and wait of xtimer_run --network-check; a silent node costs a few of "
     "them."},
    {"XTIMER_NETCHECK_MIN_BANDWIDTH", "0",
     "MB/s: a node whose best test of xtimer_run --network-check is slower is faulty; 0 = no floor. --min-bandwidth, "
     "when given, wins over it."},
    // --- flash checkpoint
    {"XTIMER_CKPT_SHM_DIR", "/dev/shm", "Folder (a tmpfs) that holds the in-memory checkpoint segments."},
    {"XTIMER_CKPT_KEEP", "3", "Checkpoint steps kept on disk; older ones are deleted once a newer one is durable."},
    {"XTIMER_CKPT_PERSIST_ON_FAILURE", "1",
     "1: when a training process dies, the saver writes its newest in-memory snapshot to disk."},
    {"XTIMER_DESYNC", "1",
     "1: every collective call leaves a fingerprint that the node agent compares across ranks (a rank out of step is "
     "named at once); 0: none are recorded."},
    {"XTIMER_DESYNC_ACTION", "report",
     "On ranks out of step (a desync verdict): report (verdict, log line, every rank's stacks) or abort (the same, "
     "then "
     "the agent terminates the ranks, so xtimer_run restarts them from the last checkpoint)."},
};

bool ParseBool(const char* s, bool* out) {
  static const char* kTrue[] = {"1", "true", "yes", "on"};
  static const char* kFalse[] = {"0", "false", "no", "off"};
  for (const char* t : kTrue)
    if (strcasecmp(s, t) == 0) return (*out = true), true;
  for (const char* f : kFalse)
    if (strcasecmp(s, f) == 0) return (*out = false), true;
  return false;
}

const char* NonEmpty(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// The user's value if set and non-empty, else its alias's (ours wins when both are set), else
// nullptr. *from: the variable the value came from, for warnings.
const char* UserValue(const char* name, const char** from = nullptr) {
  if (from != nullptr) *from = name;
  if (const char* v = NonEmpty(name)) return v;
  const Var* var = Find(name);
  if (var == nullptr || var->alias == nullptr) return nullptr;
  if (from != nullptr) *from = var->alias;
  return NonEmpty(var->alias);
}

// `from`: the variable the bad value came from (`name` or its alias).
void ReportBad(const char* name, const char* from, const char* value, const char* what) {
  Log(LogLevel::kWarn, "%s=%s is not %s; using the default %s", from, value, what, Default(name));
}

}  // namespace

std::span<const Var> All() { return kVars; }

const char* Default(const char* name) {
  const Var* var = Find(name);
  if (var == nullptr) {
    Log(LogLevel::kError, "internal: %s is not in the XTIMER_* table (common/env.cc)", name);
    return "";
  }
  return var->default_value;
}

double DefaultDouble(const char* name) { return std::strtod(Default(name), nullptr); }

int64_t DefaultInt(const char* name) { return std::strtoll(Default(name), nullptr, 10); }

bool DefaultBool(const char* name) {
  bool b = false;
  ParseBool(Default(name), &b);
  return b;
}

const Var* Find(std::string_view name) {
  for (const Var& v : kVars)
    if (name == v.name) return &v;
  return nullptr;
}

std::string String(const char* name) {
  const char* v = UserValue(name);
  return v != nullptr ? v : Default(name);
}

double Double(const char* name) {
  const char* from = name;
  if (const char* v = UserValue(name, &from)) {
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(v, &end);
    if (errno == 0 && end != v && *end == '\0') return d;
    ReportBad(name, from, v, "a number");
  }
  return DefaultDouble(name);
}

int64_t Int(const char* name) { return Int(name, INT64_MIN, INT64_MAX); }

int64_t Int(const char* name, int64_t lo, int64_t hi) {
  const char* from = name;
  if (const char* v = UserValue(name, &from)) {
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(v, &end, 10);
    bool parsed = errno == 0 && end != v && *end == '\0';
    if (parsed && i >= lo && i <= hi) return i;
    if (lo == INT64_MIN && hi == INT64_MAX) {
      ReportBad(name, from, v, "an integer");
    } else {
      char what[96];
      std::snprintf(what, sizeof what, "an integer in [%lld, %lld]", static_cast<long long>(lo),
                    static_cast<long long>(hi));
      ReportBad(name, from, v, what);
    }
  }
  return DefaultInt(name);
}

double Double(const char* name, double lo, double hi) {
  const char* from = name;
  if (const char* v = UserValue(name, &from)) {
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(v, &end);
    if (errno == 0 && end != v && *end == '\0' && d >= lo && d <= hi) return d;
    char what[96];
    std::snprintf(what, sizeof what, "a number in [%g, %g]", lo, hi);
    ReportBad(name, from, v, what);
  }
  return DefaultDouble(name);
}

bool ParseLogLevel(const char* text, int* level) {
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (strcasecmp(text, kNames[i]) == 0) return (*level = i), true;
  return false;
}

bool Bool(const char* name) {
  bool b = false;
  const char* from = name;
  if (const char* v = UserValue(name, &from)) {
    if (ParseBool(v, &b)) return b;
    ReportBad(name, from, v, "a boolean (1/0, true/false)");
  }
  return DefaultBool(name);
}

}  // namespace xtimer::env

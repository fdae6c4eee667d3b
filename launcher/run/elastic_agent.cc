#include "launcher/run/elastic_agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/env.h"
#include "common/identity.h"
#include "common/log.h"
#include "common/regular_file.h"
#include "launcher/agent/node_agent.h"
#include "launcher/run/comm_perf.h"
#include "launcher/run/numa.h"
#include "launcher/run/round_rules.h"
#include "slowdown/slowdown_verdict_json.h"

extern char** environ;

namespace xtimer::run {
namespace {

// Signals that stop xtimer_run (and its workers, gracefully), and those passed on to the workers.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr int kPassedOn[] = {SIGUSR1, SIGUSR2};

bool IsStopSignal(int sig) {
  for (int s : kStopSignals)
    if (s == sig) return true;
  return false;
}

std::vector<std::string> Environment() {
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) base.push_back(*e);
  return base;
}

// A pending stop signal, taken (0 when none).
int TakeStopSignal() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  timespec now{0, 0};
  int sig = sigtimedwait(&set, nullptr, &now);
  return sig > 0 ? sig : 0;
}

// A random (version 4) UUID, as torchrun --standalone makes its run id.
std::string NewUuid() {
  std::random_device rd;
  unsigned char b[16];
  for (unsigned char& c : b) c = static_cast<unsigned char>(rd());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  char out[37];
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

// mkdtemp of DIR/PREFIXXXXXXX; "" (and a warning) when it cannot be made.
std::string MakeTempDir(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string tmpl = dir + "/" + prefix + "XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    Log(LogLevel::kWarn, "run: cannot create the log folder %s: %s; workers get no TORCHELASTIC_ERROR_FILE",
        tmpl.c_str(), std::strerror(errno));
    return "";
  }
  return tmpl;
}

// torchrun's time format in its failure summary (local time).
std::string LocalTime(int64_t unix_ms) {
  time_t t = static_cast<time_t>(unix_ms / 1000);
  tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &local);
  return buf;
}

// A worker's TORCHELASTIC_ERROR_FILE, by the common file rule: a FIFO, a folder or a huge file
// there is said once and not read.
bool ReadErrorFile(const std::string& path, std::string* text) {
  FileRule rule;
  rule.what = "worker's error file";
  rule.max_bytes = 16 << 20;
  rule.follow_links = false;
  std::string error;
  if (ReadRegularFile(path, rule, text, &error)) return true;
  Log(LogLevel::kWarn, "run: %s: %s", path.c_str(), error.c_str());
  return false;
}

// What torch's @record wrote there: the Python traceback, else the message ("" if neither).
std::string ErrorFileTraceback(const std::string& path) {
  std::string text;
  if (!ReadErrorFile(path, &text)) return "";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  const nlohmann::json* m = &j;
  if (auto it = j.find("message"); it != j.end()) m = &*it;
  if (m->is_string()) return m->get<std::string>();
  if (!m->is_object()) return "";
  if (auto info = m->find("extraInfo"); info != m->end() && info->is_object())
    if (auto stack = info->find("py_callstack"); stack != info->end() && stack->is_string())
      return stack->get<std::string>();
  if (auto msg = m->find("message"); msg != m->end() && msg->is_string()) return msg->get<std::string>();
  return "";
}

}  // namespace

bool StopSignalPending() {
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) != 0) return false;
  for (int s : kStopSignals)
    if (sigismember(&pending, s) == 1) return true;
  return false;
}

RunSettings RunSettings::FromEnv(const RunOptions& o) {
  RunSettings s;
  // Unset (or empty) is told apart from an explicit "dump": the table's default is the preload's.
  const char* action = std::getenv("XTIMER_HANG_ACTION");
  s.hang_action = action != nullptr && *action != '\0' ? env::String("XTIMER_HANG_ACTION") : "restart";
  s.dump_wait_s = env::Double("XTIMER_DUMP_WAIT");
  s.gpu_check_timeout_s = env::Double("XTIMER_GPU_CHECK_TIMEOUT", 1, 86400);
  s.warm_delay_s = env::Double("XTIMER_WARM_DELAY", 0, 86400);
  const char* persist = std::getenv("XTIMER_CKPT_PERSIST_ON_FAILURE");
  if (!o.save_at_breakpoint && (persist == nullptr || *persist == '\0')) s.persist_on_failure = "0";
  return s;
}

std::vector<std::string> WorkerVariables(const RunSettings& s) {
  std::vector<std::string> vars = s.preload;
  vars.push_back("XTIMER_HANG_ACTION=" + s.hang_action);
  if (!s.agent_socket.empty()) vars.push_back("XTIMER_AGENT_SOCKET=" + s.agent_socket);
  if (!s.persist_on_failure.empty()) vars.push_back("XTIMER_CKPT_PERSIST_ON_FAILURE=" + s.persist_on_failure);
  return vars;
}

std::vector<std::string> WithVariables(std::vector<std::string> base, const std::vector<std::string>& vars) {
  for (const std::string& kv : vars) {
    const std::string prefix = kv.substr(0, kv.find('=') + 1);
    auto it = std::find_if(base.begin(), base.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
    if (it != base.end()) *it = kv;
    else base.push_back(kv);
  }
  return base;
}

std::vector<std::string> WorkerEnvironment(const RunOptions& o, const Round& round, int local_rank,
                                           const std::vector<std::string>& base) {
  int world = round.group_world_size * o.nproc_per_node;
  int rank = round.group_rank * o.nproc_per_node + local_rank;
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(round.group_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(round.group_world_size)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(world)},
      {"ROLE_NAME", o.role},
      {"MASTER_ADDR", round.master_addr},
      {"MASTER_PORT", std::to_string(round.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(round.restarts)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.rdzv_id},
      // Rank 0 hosts the TCP store, as under torchrun without an agent store.
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", o.signals_to_handle},
  };
  std::string nccl_async = "1";  // torchrun passes it on when set, else sets it to 1
  for (const std::string& kv : base)
    if (kv.rfind("TORCH_NCCL_ASYNC_ERROR_HANDLING=", 0) == 0) nccl_async = kv.substr(kv.find('=') + 1);
  set.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", nccl_async);
  std::vector<std::string> env;
  bool has_omp = false;
  for (const std::string& kv : base) {
    std::string key = kv.substr(0, kv.find('='));
    if (key == "OMP_NUM_THREADS") has_omp = true;
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == key;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  if (!has_omp && o.nproc_per_node > 1) env.push_back("OMP_NUM_THREADS=1");
  return env;
}

ElasticAgent::ElasticAgent(RunOptions options, RunSettings settings, std::unique_ptr<Rendezvous> rendezvous,
                           NodeAgent* agent)
    : o_(std::move(options)), settings_(std::move(settings)), rdzv_(std::move(rendezvous)), agent_(agent) {
  if (o_.standalone) o_.rdzv_id = NewUuid();  // as torchrun --standalone, whatever --rdzv-id says
  if (!settings_.warm_script.empty() && !(o_.no_python && !o_.run_path))
    warm_ = std::make_unique<WarmPool>(WorkerCommand(o_).at(0), settings_.warm_script, settings_.warm_imports);
  if (o_.numa_affinity) {
    NumaPlan plan =
        PlanNumaAffinity(SysfsRoot(), o_.nproc_per_node, std::getenv("CUDA_VISIBLE_DEVICES"), AllowedCpus());
    for (const std::string& line : plan.bound) Log(LogLevel::kInfo, "run: --numa-affinity: %s", line.c_str());
    for (const std::string& line : plan.problems) Log(LogLevel::kWarn, "run: --numa-affinity: %s", line.c_str());
    numa_cpus_ = std::move(plan.cpus);
  }
  // torchrun's layout: LOG_DIR/<run id>_<random>/attempt_<restart>/<local rank>/ holds each
  // worker's error.json (TORCHELASTIC_ERROR_FILE) and, with --redirects/--tee, stdout.log and
  // stderr.log. Without --log-dir the folder is a new /tmp/torchelastic_<random> (removed at the
  // end when the job succeeded, unlike torchrun, which leaves it); --log-dir /dev/null: no files.
  if (o_.log_dir == "/dev/null") return;
  std::string root = o_.log_dir;
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    root = temp_root_ = MakeTempDir(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "torchelastic_");
  }
  if (!root.empty()) run_log_dir_ = MakeTempDir(root, o_.rdzv_id + "_");
}

ElasticAgent::~ElasticAgent() {
  std::error_code ec;
  if (!temp_root_.empty() && !keep_temp_root_) std::filesystem::remove_all(temp_root_, ec);
}

std::vector<WorkerSpec> ElasticAgent::Specs(const Round& round) const {
  std::vector<std::string> base = WithVariables(Environment(), WorkerVariables(settings_));
  // A round that counts no restart (a node lost or added) reuses its attempt folder: emptied
  // first, as torchrun does, so an old error.json is never taken for this round's.
  std::string attempt = run_log_dir_ + "/attempt_" + std::to_string(round.restarts);
  if (!run_log_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(attempt, ec);
  }
  // Ours is the agent's own (the summary's error file is copied there), not the workers'.
  std::erase_if(base, [](const std::string& kv) { return kv.rfind("TORCHELASTIC_ERROR_FILE=", 0) == 0; });
  // An xtimer_run started by a rank of a warm interpreter inherits its marker; its own workers are
  // ranks, not that rank's helpers (preload/start/lifecycle.cc).
  std::erase_if(base, [](const std::string& kv) { return kv.rfind("XTIMER_RANK_PID=", 0) == 0; });
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    WorkerSpec s;
    s.argv = WorkerCommand(o_);
    s.env = WorkerEnvironment(o_, round, local, base);
    s.local_rank = local;
    s.rank = round.group_rank * o_.nproc_per_node + local;
    if (static_cast<size_t>(local) < numa_cpus_.size()) s.cpus = numa_cpus_[static_cast<size_t>(local)];
    const std::vector<int>& shown = o_.local_ranks_filter;
    s.console = shown.empty() || std::find(shown.begin(), shown.end(), local) != shown.end();
    if (!run_log_dir_.empty()) {
      std::string dir = attempt + "/" + std::to_string(local);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      int files = o_.redirects | o_.tee;
      if (files & kStdout) s.stdout_file = dir + "/stdout.log";
      if (files & kStderr) s.stderr_file = dir + "/stderr.log";
      s.tee_stdout = o_.tee & kStdout;
      s.tee_stderr = o_.tee & kStderr;
      s.tee_prefix = "[" + o_.role + std::to_string(local) + "]:";
      s.error_file = dir + "/error.json";
    }
    // torchrun: "" under --log-dir /dev/null (no file); otherwise each worker's own file.
    s.env.push_back("TORCHELASTIC_ERROR_FILE=" + s.error_file);
    specs.push_back(std::move(s));
  }
  return specs;
}

ElasticAgent::Outcome ElasticAgent::Monitor(WorkerGroup& group, std::string* why, int* signal) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  for (int s : kPassedOn) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  double period = o_.monitor_interval_s;
  timespec wait{static_cast<time_t>(period), static_cast<long>((period - static_cast<time_t>(period)) * 1e9)};
  // Under xtimer_run a hang restarts the workers unless the user chose another hang action.
  bool restart_on_hang = settings_.hang_action == "restart";
  double dump_wait = settings_.dump_wait_s;
  double next_tick = 0, hang_deadline = 0, next_evict_check = 0;
  int64_t hang_since_ms = 0;
  int hung_rank = -1;
  std::string hang_trigger;
  for (;;) {
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &wait);
    if (sig > 0 && IsStopSignal(sig)) return (*signal = sig), Outcome::kSignal;
    if (sig == SIGUSR1 || sig == SIGUSR2)
      for (pid_t pid : group.pids()) kill(pid, sig);
    FillWarmWhenDue();  // before a failure ends the round: one that came early still leaves them
    switch (group.Poll()) {
      case WorkerGroup::State::kSucceeded: return Outcome::kSucceeded;
      case WorkerGroup::State::kFailed: return Outcome::kFailed;
      case WorkerGroup::State::kRunning: break;
    }
    double now = MonotonicS();
    if (agent_ != nullptr && now >= next_tick) {
      next_tick = now + 0.2;
      agent_->Tick();
      if (restart_on_hang && hung_rank < 0 && agent_->FindHung(&hung_rank, &hang_trigger)) {
        hang_since_ms = WallMs();
        hang_deadline = now + dump_wait + 5;
        Log(LogLevel::kWarn, "run: rank %d hangs (%s); workers restart once its stacks are merged", hung_rank,
            hang_trigger.c_str());
      }
      // The hung rank's own dump may come before the round asks: allow a few seconds' lead.
      if (hung_rank >= 0 && (agent_->DumpsSettled(hang_since_ms - 5000) || now > hang_deadline)) {
        *why = "rank " + std::to_string(hung_rank) + " hung: " + hang_trigger;
        return Outcome::kHung;
      }
    }
    if (o_.evict_slow_nodes && agent_ != nullptr && now >= next_evict_check) {
      next_evict_check = now + 1;
      if (EvictIfSlow(why)) return Outcome::kEvicted;
    }
    if (rdzv_->NewRoundNeeded(why)) return Outcome::kNewRound;
  }
}

void ElasticAgent::FillWarmWhenDue() {
  if (warm_at_ <= 0 || MonotonicS() < warm_at_) return;
  warm_at_ = 0;
  warm_->Fill(warm_specs_);
}

bool ElasticAgent::EvictIfSlow(std::string* why) {
  EvictionCall call = agent_->CheckEviction(round_.group_world_size);
  if (!call.evict) {
    if (!call.say_once.empty() && eviction_said_.insert(call.say_once).second)
      Log(LogLevel::kInfo, "run: --evict-slow-nodes: this node (%s) %s", agent_->node_name().c_str(),
          call.reason.c_str());
    return false;
  }
  const RoundLimits limits{o_.min_nodes, o_.max_nodes, o_.node_unit};
  const int spares = rdzv_->SparesWaiting();
  if (!GoesOnWithout(round_.group_world_size, spares, limits)) {
    if (eviction_said_.insert("stays " + call.key).second)
      Log(LogLevel::kWarn,
          "run: --evict-slow-nodes: this node (%s) is slow and stays: the job cannot go on without it (%d node(s), "
          "%d spare(s) waiting, --nnodes %d:%d): %s",
          agent_->node_name().c_str(), round_.group_world_size, spares, o_.min_nodes, o_.max_nodes,
          call.reason.c_str());
    return false;
  }
  const slowdown::Finding& f = call.finding;
  nlohmann::json record = {{"node", round_.nodes.size() > static_cast<size_t>(round_.group_rank)
                                        ? round_.nodes[static_cast<size_t>(round_.group_rank)]
                                        : std::string()},
                           {"name", agent_->node_name()},
                           {"round", round_.number},
                           {"group_rank", round_.group_rank},
                           {"cause", slowdown::CauseName(f.cause)},
                           {"scope", slowdown::ScopeName(f.scope)},
                           {"cost", f.cost},
                           {"since", f.since},
                           {"named_for_s", call.named_for_s},
                           {"detail", f.detail},
                           {"spares", spares},
                           {"time", WallMs() / 1000.0}};
  const std::string reason = "node " + agent_->node_name() + " (group rank " + std::to_string(round_.group_rank) +
                             ") evicted as slow (--evict-slow-nodes): " + call.reason;
  std::string error;
  if (!rdzv_->Evict(record.dump(), reason, &error)) {
    if (eviction_said_.insert("refused " + error).second)
      Log(LogLevel::kWarn, "run: --evict-slow-nodes: this node (%s) is slow and stays: %s", agent_->node_name().c_str(),
          error.c_str());
    return false;
  }
  agent_->ReportEviction(record.dump(), reason);  // the collector's page and /metrics
  Log(LogLevel::kWarn, "run: evicting this node: %s; slow since %.3f (unix s), %d spare(s) waiting", reason.c_str(),
      f.since, spares);
  *why = reason;
  return true;
}

int ElasticAgent::CommPerfTest(const Round& round) {
  const double timeout_s = settings_.gpu_check_timeout_s;
  const double t0 = MonotonicS();
  Log(LogLevel::kInfo, "run: --comm-perf-test: round %lld's %d rank(s) measure their allreduce",
      (long long)round.number, round.group_world_size * o_.nproc_per_node);
  WorkerGroup group;
  std::string error;
  if (!group.Start(CommPerfSpecs(o_, round, WithVariables(Environment(), WorkerVariables(settings_)), timeout_s),
                   &error)) {
    Log(LogLevel::kWarn, "run: --comm-perf-test could not start (%s); training starts anyway", error.c_str());
    return 0;
  }
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  timespec wait{0, 50 * 1000 * 1000};
  // The processes stop their own waits at the deadline; what is left a little later is killed.
  const double kill_at = t0 + timeout_s + 5;
  for (;;) {
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &wait);
    if (sig > 0 && IsStopSignal(sig)) {
      group.Stop(0);
      return sig;
    }
    WorkerGroup::State state = group.Poll();
    if (state == WorkerGroup::State::kSucceeded) {
      group.Stop(0);
      Log(LogLevel::kInfo, "run: --comm-perf-test done in %.2f s", MonotonicS() - t0);
      return 0;
    }
    if (state == WorkerGroup::State::kFailed || MonotonicS() > kill_at) {
      group.Stop(0);
      std::string why =
          state == WorkerGroup::State::kFailed
              ? "rank " + std::to_string(group.first_failure().rank) + ": " + group.first_failure().Describe()
              : "not done after " + std::to_string(static_cast<int>(timeout_s)) + " s (XTIMER_GPU_CHECK_TIMEOUT)";
      Log(LogLevel::kWarn, "run: --comm-perf-test did not complete (%s); training starts anyway", why.c_str());
      return 0;
    }
  }
}

void ElasticAgent::PersistCheckpoints() {
  if (!o_.save_at_breakpoint || agent_ == nullptr) return;
  if (!agent_->WaitCheckpointsPersisted(120))
    Log(LogLevel::kWarn, "run: the checkpoint saver is still writing after 120 s; restarting the workers anyway");
}

void ElasticAgent::PrintFailureSummary(const std::string& headline) {
  // torchrun's ChildFailedError block, with the same facts in the same words, then ours: the last
  // lines of the failed worker's stderr.
  auto describe = [](const WorkerExit& f, std::string* out) {
    int code = WIFSIGNALED(f.status) ? -WTERMSIG(f.status) : WEXITSTATUS(f.status);
    const char* abbrev = WIFSIGNALED(f.status) ? sigabbrev_np(WTERMSIG(f.status)) : nullptr;
    const std::string signal_name = abbrev ? std::string(" (SIG") + abbrev + ")" : "";  // " (SIGKILL)"
    std::string traceback;
    if (!f.error_file.empty()) traceback = ErrorFileTraceback(f.error_file);
    if (traceback.empty()) {
      if (WIFSIGNALED(f.status)) {
        traceback =
            "Signal " + std::to_string(WTERMSIG(f.status)) + signal_name + " received by PID " + std::to_string(f.pid);
      } else {
        traceback = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
      }
    }
    while (!traceback.empty() && traceback.back() == '\n') traceback.pop_back();
    std::string indented;
    for (char c : traceback) indented += c == '\n' ? std::string("\n  ") : std::string(1, c);
    *out += "  time      : " + LocalTime(f.when_unix_ms) + "\n";
    *out += "  host      : " + HostName() + "\n";
    *out += "  rank      : " + std::to_string(f.rank) + " (local_rank: " + std::to_string(f.local_rank) + ")\n";
    // torchrun 2.9+ appends the signal's name after a space that is always there.
    *out += "  exitcode  : " + std::to_string(code) + " (pid: " + std::to_string(f.pid) + ") " + signal_name + "\n";
    *out += "  error_file: " + (f.error_file.empty() ? std::string("<N/A>") : f.error_file) + "\n";
    *out += "  traceback : " + indented + "\n";
  };
  const std::string rule(60, '='), thin(60, '-');
  std::string out = "xtimer_run: the job failed: " + headline + "\n";
  if (have_failure_) {
    const WorkerExit& f = first_failure_;
    std::string script = o_.script.empty() ? std::string("the workers") : o_.script[0];
    out += rule + "\n" + script + " FAILED\n" + thin + "\nFailures:\n";
    if (other_failures_.empty()) out += "  <NO_OTHER_FAILURES>\n";
    for (size_t i = 0; i < other_failures_.size(); ++i) {
      out += "[" + std::to_string(i + 1) + "]:\n";
      describe(other_failures_[i], &out);
    }
    out += thin + "\nRoot Cause (first observed failure):\n[0]:\n";
    describe(f, &out);
    out += rule + "\n";
    if (!f.stderr_tail.empty()) {
      out += "last lines of rank " + std::to_string(f.rank) + "'s stderr:\n";
      for (const std::string& line : f.stderr_tail) out += "  | " + line + "\n";
    }
    // torchrun copies the root cause's error file to its own TORCHELASTIC_ERROR_FILE, for whoever
    // started it (a scheduler reading why the job failed).
    const char* parent = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (parent != nullptr && *parent != '\0' && !f.error_file.empty()) {
      std::string text;
      if (ReadErrorFile(f.error_file, &text)) {
        std::ofstream out(parent, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out.flush()) Log(LogLevel::kWarn, "run: cannot write the error file %s", parent);
      }
    }
    keep_temp_root_ = true;  // the summary names the error files
  }
  std::fputs(out.c_str(), stderr);
}

int ElasticAgent::Run() {
  for (;;) {
    Round round;
    std::string error;
    if (!rdzv_->Join(&round, &error)) {
      if (int sig = TakeStopSignal(); sig != 0) {
        Log(LogLevel::kWarn, "run: %s while joining a round: leaving",
            sigabbrev_np(sig) ? sigabbrev_np(sig) : "signal");
        rdzv_->Leave();
        return 128 + sig;
      }
      if (have_failure_) PrintFailureSummary(error);
      else std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
      rdzv_->Leave();
      return 1;
    }
    round_ = round;
    Log(LogLevel::kInfo, "run: round %lld (restart %d of %d): group rank %d of %d, world size %d, master %s:%d",
        (long long)round.number, round.restarts, o_.max_restarts, round.group_rank, round.group_world_size,
        round.group_world_size * o_.nproc_per_node, round.master_addr.c_str(), round.master_port);
    if (o_.comm_perf_test && round.restarts == 0) {
      if (int sig = CommPerfTest(round); sig != 0) {
        rdzv_->Leave();
        return 128 + sig;
      }
    }
    if (agent_ != nullptr) {
      agent_->BeginRound();
      if (o_.evict_slow_nodes) agent_->SetEvictions(rdzv_->Evictions());
    }
    WorkerGroup group;
    const std::vector<WorkerSpec> specs = Specs(round);
    if (!group.Start(specs, &error, warm_.get())) {
      std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
      rdzv_->RequestRestart("node " + HostName() + " could not start its workers: " + error);
      rdzv_->Leave();
      return 1;
    }
    if (warm_) {  // for the next round, once this one trains (here with no delay, else Monitor)
      warm_specs_ = specs;
      warm_at_ = MonotonicS() + settings_.warm_delay_s;
      FillWarmWhenDue();
    }
    std::string why;
    int sig = 0;
    Outcome outcome = Monitor(group, &why, &sig);
    switch (outcome) {
      case Outcome::kSucceeded:
        group.Stop(0);
        rdzv_->Finished();
        Log(LogLevel::kInfo, "run: all %d worker(s) of this node finished", o_.nproc_per_node);
        rdzv_->Leave();
        return 0;
      case Outcome::kSignal:
        Log(LogLevel::kWarn, "run: %s: stopping the workers", sigabbrev_np(sig) ? sigabbrev_np(sig) : "signal");
        group.Stop(o_.stop_grace_s);
        rdzv_->Leave();
        return 128 + sig;
      case Outcome::kEvicted: {
        const int evictions = rdzv_->Evictions();  // this one included, unless etcd failed to say
        agent_->SetEvictions(evictions > 0 ? evictions : 1);
        group.Stop(o_.stop_grace_s);
        PersistCheckpoints();
        rdzv_->Leave();
        std::fprintf(stderr, "xtimer_run: %s; it cannot join run '%s' again\n", why.c_str(), o_.rdzv_id.c_str());
        return 1;
      }
      case Outcome::kNewRound: {
        Log(LogLevel::kWarn, "run: %s; stopping the workers for a new round", why.c_str());
        // Stacks another node's hang asked for are handed on first (bounded).
        double until = MonotonicS() + 3;
        while (agent_ != nullptr && !agent_->DumpsSettled(0) && MonotonicS() < until) usleep(50 * 1000);
        group.Stop(o_.stop_grace_s);
        continue;
      }
      case Outcome::kFailed:
      case Outcome::kHung: {
        group.Stop(o_.stop_grace_s);
        if (outcome == Outcome::kFailed) {
          first_failure_ = group.first_failure();
          other_failures_ = group.other_failures();
          have_failure_ = true;
          why = "rank " + std::to_string(first_failure_.rank) + " (local rank " +
                std::to_string(first_failure_.local_rank) + ") on " + HostName() +
                " failed: " + first_failure_.Describe();
        }
        Log(LogLevel::kWarn, "run: %s", why.c_str());
        PersistCheckpoints();
        rdzv_->RequestRestart(why);
        if (round.restarts + 1 > o_.max_restarts) {
          PrintFailureSummary(why + "; no restarts left (--max-restarts " + std::to_string(o_.max_restarts) + ")");
          rdzv_->Leave();
          return 1;
        }
        continue;
      }
    }
  }
}

}  // namespace xtimer::run

#include "launcher/run/elastic_agent.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/clock.h"
#include "common/env.h"
#include "common/identity.h"
#include "common/log.h"
#include "launcher/agent/node_agent.h"

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

}  // namespace

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
  };
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

ElasticAgent::ElasticAgent(RunOptions options, std::unique_ptr<Rendezvous> rendezvous, NodeAgent* agent)
    : o_(std::move(options)), rdzv_(std::move(rendezvous)), agent_(agent) {
  if (!o_.log_dir.empty()) {
    std::random_device rd;
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "%06x", rd() & 0xffffff);
    run_log_dir_ = o_.log_dir + "/" + o_.rdzv_id + "_" + suffix;
  }
}

std::vector<WorkerSpec> ElasticAgent::Specs(const Round& round) const {
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) base.push_back(*e);
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    WorkerSpec s;
    s.argv = WorkerCommand(o_);
    s.env = WorkerEnvironment(o_, round, local, base);
    s.local_rank = local;
    s.rank = round.group_rank * o_.nproc_per_node + local;
    if (!run_log_dir_.empty()) {
      std::string dir = run_log_dir_ + "/attempt_" + std::to_string(round.restarts) + "/" + std::to_string(local);
      int files = o_.redirects | o_.tee;
      if (files & kStdout) s.stdout_file = dir + "/stdout.log";
      if (files & kStderr) s.stderr_file = dir + "/stderr.log";
      s.tee_stdout = o_.tee & kStdout;
      s.tee_stderr = o_.tee & kStderr;
    }
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
  std::string action = env::String("XTIMER_HANG_ACTION");
  bool restart_on_hang = action == "restart";
  double dump_wait = env::Double("XTIMER_DUMP_WAIT");
  double next_tick = 0, hang_deadline = 0;
  int64_t hang_since_ms = 0;
  int hung_rank = -1;
  std::string hang_trigger;
  for (;;) {
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &wait);
    if (sig > 0 && IsStopSignal(sig)) return (*signal = sig), Outcome::kSignal;
    if (sig == SIGUSR1 || sig == SIGUSR2)
      for (pid_t pid : group.pids()) kill(pid, sig);
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
    if (rdzv_->NewRoundNeeded(why)) return Outcome::kNewRound;
  }
}

void ElasticAgent::PersistCheckpoints() {
  if (!o_.save_at_breakpoint || agent_ == nullptr) return;
  if (!agent_->WaitCheckpointsPersisted(120))
    Log(LogLevel::kWarn, "run: the checkpoint saver is still writing after 120 s; restarting the workers anyway");
}

void ElasticAgent::PrintFailureSummary(const std::string& headline) const {
  std::string out = "xtimer_run: the job failed: " + headline + "\n";
  if (have_failure_) {
    const WorkerExit& f = first_failure_;
    out += "first failure observed on this node:\n";
    out += "  time      : " + IsoUtc(static_cast<uint64_t>(f.when_unix_ms) * 1000000) + "\n";
    out += "  host      : " + HostName() + "\n";
    out += "  rank      : " + std::to_string(f.rank) + " (local_rank: " + std::to_string(f.local_rank) + ")\n";
    out += "  exit      : " + f.Describe() + " (pid: " + std::to_string(f.pid) + ")\n";
    if (!f.stderr_tail.empty()) {
      out += "  last lines of its stderr:\n";
      for (const std::string& line : f.stderr_tail) out += "    | " + line + "\n";
    }
  }
  std::fputs(out.c_str(), stderr);
}

int ElasticAgent::Run() {
  for (;;) {
    Round round;
    std::string error;
    if (!rdzv_->Join(&round, &error)) {
      if (have_failure_) PrintFailureSummary(error);
      else std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
      rdzv_->Leave();
      return 1;
    }
    round_ = round;
    Log(LogLevel::kInfo, "run: round %lld (restart %d of %d): group rank %d of %d, world size %d, master %s:%d",
        (long long)round.number, round.restarts, o_.max_restarts, round.group_rank, round.group_world_size,
        round.group_world_size * o_.nproc_per_node, round.master_addr.c_str(), round.master_port);
    if (agent_ != nullptr) agent_->BeginRound();
    WorkerGroup group;
    if (!group.Start(Specs(round), &error)) {
      std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
      rdzv_->RequestRestart("node " + HostName() + " could not start its workers: " + error);
      rdzv_->Leave();
      return 1;
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

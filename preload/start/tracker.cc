#include "preload/start/tracker.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/mutex.h"
#include "preload/hang/watchdog.h"
#include "preload/link/agent_link.h"
#include "preload/steps/python_hooks.h"
#include "preload/steps/step_signals.h"
#include "preload/timing/cupti_backend.h"
#include "preload/timing/poller.h"

namespace xtimer {
namespace {

std::atomic<Tracker*> g_tracker{nullptr};
std::atomic<bool> g_off{false};  // decided: pass everything through
constinit Mutex g_init_mu;

void AtExit() {
  if (Tracker* t = g_tracker.load(std::memory_order_acquire)) t->Shutdown();
}

}  // namespace

Tracker::Tracker(const PreloadConfig& config) : LaunchPath(config) {
  // Each part gets its settings and the few things it reads or hands on, nothing more.
  auto rank_info = [this] { return this->rank_info(); };
  agent_ = new AgentLink(AgentLink::Settings{config.hang_action}, rank_info);
  if (config.steps) steps_ = new StepSignals(*this, agent_);
  poller_ = new Poller(*this, steps_, agent_);
  watchdog_ = new Watchdog(Watchdog::Settings{config.hang_timeout_s, config.hang_action, config.timeline_path},
                           *poller_, rank_info, agent_);
}

Tracker* Tracker::Instance() {
  Tracker* t = g_tracker.load(std::memory_order_acquire);
  if (t != nullptr) [[likely]]
    return t;
  if (g_off.load(std::memory_order_relaxed)) return nullptr;
  MutexLock lock(g_init_mu);  // once per process, at the first CUDA call
  t = g_tracker.load(std::memory_order_acquire);
  if (t != nullptr || g_off.load(std::memory_order_relaxed)) return t;
  PreloadConfig config = PreloadConfig::FromEnv();
  if (config.disabled) {
    Log(LogLevel::kInfo, "XTIMER_DISABLE is set: CUDA calls pass through untimed");
    g_off.store(true);
    return nullptr;
  }
  if (!gpu::Available()) {
    Log(LogLevel::kInfo, "no CUDA runtime or driver loaded: CUDA calls pass through untimed");
    g_off.store(true);
    return nullptr;
  }
  t = new Tracker(config);  // lives until exit; never freed (threads may still read it)
  t->ChooseTimingMode();
  g_tracker.store(t, std::memory_order_release);
  cupti::SetLaunchPath(t);       // CUPTI's callbacks may now time graph launches no hook saw
  python::Enable(config.steps);  // the Python hook module's GC and DataLoader spans
  // Before the watchdog: the dumper then leaves symbolising to the agent.
  const bool agent = t->agent_->Start(*t->poller_, t->steps_, &t->comms());
  t->poller_->Start();
  t->watchdog_->Start(agent);
  Log(LogLevel::kDebug, "started: output in %s", config.timeline_path.c_str());
  return t;
}

void Tracker::RegisterExitHandler() {
  if (!exit_registered_.exchange(true)) atexit(AtExit);
}

void Tracker::Shutdown() { poller_->Stop(); }

void Tracker::AfterForkInChild() {
  // CUDA cannot be used in a child forked after the parent initialised it, and the parent's
  // threads do not exist here: the child passes everything through.
  if (g_tracker.load(std::memory_order_relaxed) != nullptr) {
    g_tracker.store(nullptr, std::memory_order_relaxed);
    cupti::SetLaunchPath(nullptr);
    g_off.store(true, std::memory_order_relaxed);
  }
  python::Enable(false);     // nobody drains the child's spans
  new (&g_init_mu) Mutex();  // the parent may have held it while forking
}

}  // namespace xtimer

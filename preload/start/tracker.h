// The library, created at the first hooked CUDA call (nothing runs before it): the launch path's
// state (launch_path.h, which the hooks use through it) and the threads that read it. Creating
// it wires the parts with their settings and narrow interfaces — the poller drains the launch
// path and hands summaries and steps on, the watchdog reads the poller's in-flight ops, the
// agent link sends what they offer — and starts them; no part holds the tracker itself.
#pragma once

#include <atomic>

#include "preload/timing/launch_path.h"

namespace xtimer {

class AgentLink;
class Poller;
class StepSignals;
class Watchdog;

class Tracker : public LaunchPath {
 public:
  // The tracker, created on first use; nullptr when the library passes everything through
  // (XTIMER_DISABLE=1, no CUDA loaded, or a child forked after CUDA was used).
  static Tracker* Instance();

  // After a real CUDA call has returned: registers the exit handler once. Registering only
  // then puts it after the CUDA runtime's own (registered at its initialisation), so ours runs
  // first at exit, while events can still be queried.
  void AfterRealCall() {
    if (!exit_registered_.load(std::memory_order_relaxed)) [[unlikely]]
      RegisterExitHandler();
  }

  // Called at exit and after fork in the child.
  void Shutdown();
  static void AfterForkInChild();

 private:
  explicit Tracker(const PreloadConfig& config);
  void RegisterExitHandler();
  std::atomic<bool> exit_registered_{false};
  // The parts, created with the tracker and never freed (threads may still read them).
  AgentLink* agent_ = nullptr;
  StepSignals* steps_ = nullptr;  // null unless XTIMER_STEPS
  Poller* poller_ = nullptr;
  Watchdog* watchdog_ = nullptr;
};

}  // namespace xtimer

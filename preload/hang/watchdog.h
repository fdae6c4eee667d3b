// Hang detection. Every min(XTIMER_HANG_TIMEOUT / 10, 0.5 s) the watchdog thread looks at
//  - the ops in flight: one that started on its stream (start event complete) and has not
//    finished for XTIMER_HANG_TIMEOUT is hung; ops queued behind it on its stream are reported
//    as waiting behind it;
//  - host threads blocked in a synchronising CUDA call for longer than the timeout;
//  - the poller itself: stuck inside a CUDA query for longer than the timeout (a driver hang).
// A hang is acted on once (XTIMER_HANG_ACTION: dump, abort, log) and again only after a check
// that finds nothing hung. The watchdog is also the stack dumper's provider: it supplies rank,
// in-flight ops and the line saying what was found stuck.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "preload/base/config.h"
#include "preload/capture/dumper.h"

namespace xtimer {

class Poller;

// Who is told when a hang is found or resolves (the agent link).
class HangSink {
 public:
  // A hang was found (hung, with what), or the hang resolved.
  virtual void SetHang(bool hung, const std::string& trigger) = 0;

 protected:
  ~HangSink() = default;
};

class Watchdog : public capture::DumpProvider {
 public:
  struct Settings {
    double hang_timeout_s = 0;  // XTIMER_HANG_TIMEOUT
    HangAction hang_action = HangAction::kDump;
    std::string timeline_path;  // where the stacks go (for the log line)
  };
  // Watches `poller`'s in-flight ops and heartbeat and the blocked threads; `rank_info` names
  // the rank; `hang_sink` hears of hangs. All outlive the watchdog.
  Watchdog(Settings settings, Poller& poller, std::function<RankInfo()> rank_info, HangSink* hang_sink);
  // Starts the dumper (dump signal, capture signal) and the watchdog thread. With
  // `agent_symbolizes` (the agent link runs: XTIMER_AGENT_SOCKET) the agent symbolises, not the dumper.
  void Start(bool agent_symbolizes);

  // capture::DumpProvider
  RankInfo GetRankInfo() override;
  InflightOps GetInflightOps() override;
  std::string Trigger() override;

  // What one check found: "" if nothing is hung. Public for tests.
  std::string FindHang();

 private:
  void Loop();
  void Act(const std::string& what);

  const Settings settings_;
  Poller& poller_;
  const std::function<RankInfo()> rank_info_;
  HangSink* const hang_sink_;
  std::thread thread_;
  Mutex trigger_mu_;
  std::string trigger_ XT_GUARDED_BY(trigger_mu_);  // what the latest hang was (for the stack file)
  bool hang_reported_ = false;                      // watchdog thread only
};

}  // namespace xtimer

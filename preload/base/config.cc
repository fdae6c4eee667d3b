#include "preload/base/config.h"

#include <algorithm>
#include <cstdint>

#include "common/env.h"
#include "common/log.h"

namespace xtimer {

PreloadConfig PreloadConfig::FromEnv() {
  PreloadConfig c;
  c.disabled = env::Bool("XTIMER_DISABLE");
  c.timeline_path = env::String("XTIMER_TIMELINE_PATH");
  // Out-of-range values warn and take the default (docs/config.md gives each range).
  c.report_interval_s = env::Double("XTIMER_REPORT_INTERVAL", 0, 1e9);
  c.kernel_sample = env::Int("XTIMER_KERNEL_SAMPLE", 0, INT32_MAX);
  c.cupti = env::Bool("XTIMER_CUPTI");
  c.kernel_start_event = env::Bool("XTIMER_KERNEL_START_EVENT");
  c.trace_ops = env::Int("XTIMER_TRACE", 0, 1 << 24);
  c.max_inflight = env::Int("XTIMER_MAX_INFLIGHT", 64, 1 << 22);
  c.steps = env::Bool("XTIMER_STEPS");
  c.desync = env::Bool("XTIMER_DESYNC");
  c.hang_timeout_s = env::Double("XTIMER_HANG_TIMEOUT");
  if (!(c.hang_timeout_s > 0)) {
    Log(LogLevel::kWarn, "XTIMER_HANG_TIMEOUT must be > 0; using 300");
    c.hang_timeout_s = 300;
  }
  std::string action = env::String("XTIMER_HANG_ACTION");
  if (action == "abort") {
    c.hang_action = HangAction::kAbort;
  } else if (action == "log") {
    c.hang_action = HangAction::kLog;
  } else if (action != "dump" && action != "restart") {  // restart: the rank dumps, xtimer_run restarts it
    Log(LogLevel::kWarn, "XTIMER_HANG_ACTION=%s is not dump, abort, log or restart; using dump", action.c_str());
  }
  return c;
}

}  // namespace xtimer

#include "preload/config.h"

#include <algorithm>

#include "common/env.h"
#include "common/log.h"

namespace xtimer {

PreloadConfig PreloadConfig::FromEnv() {
  PreloadConfig c;
  c.disabled = env::Bool("XTIMER_DISABLE");
  c.timeline_path = env::String("XTIMER_TIMELINE_PATH");
  c.report_interval_s = std::max(0.0, env::Double("XTIMER_REPORT_INTERVAL"));
  c.kernel_sample = std::max<int64_t>(0, env::Int("XTIMER_KERNEL_SAMPLE"));
  c.cupti = env::Bool("XTIMER_CUPTI");
  c.trace_ops = std::max<int64_t>(0, env::Int("XTIMER_TRACE"));
  c.max_inflight = std::clamp<int64_t>(env::Int("XTIMER_MAX_INFLIGHT"), 64, 1 << 22);
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

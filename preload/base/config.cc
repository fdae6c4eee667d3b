#include "preload/base/config.h"

#include <algorithm>
#include <cstdint>

#include "common/env.h"
#include "common/log.h"

namespace xtimer {
namespace {

// restart: the rank dumps, and xtimer_run restarts every worker.
bool ParseHangAction(const std::string& word, HangAction* action) {
  if (word == "dump" || word == "restart") return (*action = HangAction::kDump), true;
  if (word == "abort") return (*action = HangAction::kAbort), true;
  if (word == "log") return (*action = HangAction::kLog), true;
  return false;
}

}  // namespace

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
    Log(LogLevel::kWarn, "XTIMER_HANG_TIMEOUT must be > 0; using the default %s", env::Default("XTIMER_HANG_TIMEOUT"));
    c.hang_timeout_s = env::DefaultDouble("XTIMER_HANG_TIMEOUT");
  }
  std::string action = env::String("XTIMER_HANG_ACTION");
  if (!ParseHangAction(action, &c.hang_action)) {
    Log(LogLevel::kWarn, "XTIMER_HANG_ACTION=%s is not dump, abort, log or restart; using the default %s",
        action.c_str(), env::Default("XTIMER_HANG_ACTION"));
    ParseHangAction(env::Default("XTIMER_HANG_ACTION"), &c.hang_action);
  }
  return c;
}

}  // namespace xtimer

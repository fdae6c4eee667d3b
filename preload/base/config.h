// The preloaded library's settings, read once from XTIMER_* at the first CUDA call.
#pragma once

#include <cstdint>
#include <string>

#include "common/env.h"

namespace xtimer {

enum class HangAction { kDump, kAbort, kLog };

// Every member with an XTIMER_* row starts from the table's default (common/env.cc), never from a
// literal of its own; FromEnv then reads the environment.
struct PreloadConfig {
  bool disabled = env::DefaultBool("XTIMER_DISABLE");
  std::string timeline_path = env::Default("XTIMER_TIMELINE_PATH");
  double report_interval_s = env::DefaultDouble("XTIMER_REPORT_INTERVAL");
  int64_t kernel_sample = env::DefaultInt("XTIMER_KERNEL_SAMPLE");  // 0 = none, 1 = all, N = 1 in N
  bool cupti = env::DefaultBool("XTIMER_CUPTI");                    // try the CUPTI backend (cupti_backend.h)
  // Event-pair mode: a start event for plain kernels too (else only their end, timed_call.h).
  bool kernel_start_event = env::DefaultBool("XTIMER_KERNEL_START_EVENT");
  int64_t trace_ops = env::DefaultInt("XTIMER_TRACE");  // last N ops per rank, 0 = off
  int64_t max_inflight = env::DefaultInt("XTIMER_MAX_INFLIGHT");
  double hang_timeout_s = env::DefaultDouble("XTIMER_HANG_TIMEOUT");
  HangAction hang_action = HangAction::kDump;
  bool steps = env::DefaultBool("XTIMER_STEPS");    // step records (step_signals.h)
  bool desync = env::DefaultBool("XTIMER_DESYNC");  // collective fingerprints for the agent (comm_table.h)

  static PreloadConfig FromEnv();
};

}  // namespace xtimer

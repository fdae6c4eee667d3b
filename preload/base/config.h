// The preloaded library's settings, read once from XTIMER_* at the first CUDA call.
#pragma once

#include <cstdint>
#include <string>

namespace xtimer {

enum class HangAction { kDump, kAbort, kLog };

struct PreloadConfig {
  bool disabled = false;
  std::string timeline_path;
  double report_interval_s = 30;
  int64_t kernel_sample = 1;  // 0 = none, 1 = all, N = 1 in N
  bool cupti = true;          // try the CUPTI backend (cupti_backend.h)
  // Event-pair mode: a start event for plain kernels too (else only their end, timed_call.h).
  bool kernel_start_event = false;
  int64_t trace_ops = 0;  // last N ops per rank, 0 = off
  int64_t max_inflight = 65536;
  double hang_timeout_s = 300;
  HangAction hang_action = HangAction::kDump;
  bool steps = true;   // step records (step_signals.h)
  bool desync = true;  // XTIMER_DESYNC: collective fingerprints for the agent (comm_table.h)

  static PreloadConfig FromEnv();
};

}  // namespace xtimer

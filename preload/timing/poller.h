// The one thread that reads completions. It drains the launch queue into per-stream FIFOs
// (a stream completes in order, so only each FIFO's head needs querying), turns events into
// durations (a one-event kernel's start from the op before it, one_event.h), keeps per-class
// statistics, grows the event pools, and writes the summary (and trace) every
// XTIMER_REPORT_INTERVAL seconds and at exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "preload/base/inflight_op.h"
#include "preload/timing/cupti_backend.h"
#include "preload/timing/gpu_clock.h"
#include "preload/timing/one_event.h"
#include "preload/timing/op_record.h"
#include "preload/timing/poller_sinks.h"
#include "preload/timing/trace_buffer.h"

namespace xtimer {

class LaunchPath;
class StreamWatch;

class Poller {
 public:
  // Drains `launch`'s queue and times its ops. `steps` (null: XTIMER_STEPS=0) gets each op's
  // facts; `summaries` gets the summary every 2 s and at exit. Both outlive the poller.
  Poller(LaunchPath& launch, StepSink* steps, SummarySink* summaries);
  void Start();
  // Stops the thread, completes what has completed, writes the final reports. Idempotent.
  void Stop();

  // Ops issued and not finished, oldest first per stream; for stack files and the watchdog.
  // Waits at most `wait_ms` for the poller's lock (it could be stuck inside a driver call).
  bool Snapshot(InflightOps* out, int wait_ms) XT_EXCLUDES(mu_);

  // Writes summary (and trace) now. Poller thread or after Stop.
  void WriteReports(bool final);

  // CLOCK_MONOTONIC at the start of the poller's latest iteration (0 before the first). An old
  // heartbeat means the poller is stuck inside a CUDA call: the driver itself is hung.
  uint64_t heartbeat_ns() const { return heartbeat_ns_.load(std::memory_order_relaxed); }

 private:
  struct Pending {
    OpRecord rec;
    uint64_t started_ns = 0;  // when the poller first saw the op start (its start event, or at the head)
  };
  struct StreamOps {
    std::deque<Pending> fifo;  // issued, not completed, in issue order
    StreamTail tail;           // the last op completed (one-event kernels start from its end)
  };
  void Loop();
  void DrainQueue() XT_REQUIRES(mu_);
  // Completes each stream's finished heads.
  void CompleteFinished() XT_REQUIRES(mu_);
  // The stream's head op: kNotReady while it runs; else accounts it (its duration and GPU start),
  // gives its events back and moves the stream's tail to its end.
  gpu::Query Complete(StreamTail& tail, const Pending& p);
  void SnapshotLocked(InflightOps* out) XT_REQUIRES(mu_);
  // `start_ns`: the GPU start on the host clock, 0 when not known (or not asked for).
  void Account(const Pending& p, uint64_t dur_ns, uint64_t start_ns);
  // CUPTI mode: appends the streams `watch` finds stalled to the Snapshot's `out` (whose paired
  // ops start at `first`).
  void AddStalledStreams(StreamWatch& watch, size_t first, InflightOps* out);
  // CUPTI mode: counts and times one op from its activity record.
  void AccountCupti(const CuptiOp& op);
  uint32_t CuptiClass(const CuptiOp& op);
  // Issue time of the oldest op still pending (UINT64_MAX: none).
  uint64_t OldestPending() const XT_REQUIRES(mu_);

  LaunchPath& launch_;
  SummarySink* const summaries_;
  Mutex mu_;  // the poller vs. Snapshot
  std::unordered_map<uint64_t, StreamOps> streams_ XT_GUARDED_BY(mu_);
  bool one_event_ = false;  // plain kernels carry their end event alone: keep each stream's tail
  std::unordered_map<std::string, uint32_t> cupti_kernels_;  // kernel name -> class (poller only)
  TraceBuffer trace_;
  GpuClock clock_;         // GPU event times on the host clock (trace, steps)
  StepSink* const steps_;  // null when off; lives as long as the process
  std::thread thread_;
  Mutex wake_mu_;
  CondVar wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stopped_{false};
  uint64_t next_report_ns_ = 0;
  uint64_t next_agent_summary_ns_ = 0;
  std::atomic<uint64_t> heartbeat_ns_{0};
};

}  // namespace xtimer

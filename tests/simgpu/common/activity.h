// The simulated driver's activity feed, read by the simulated libcupti (cupti/). The real
// CUPTI learns about kernels, copies and memsets from inside the real driver; here libcuda
// exports simgpu_activity_set_sink, and libcupti installs a sink when an activity kind is
// enabled. Internal to the simulation: no program or hook ever sees this interface.
#pragma once

#include <cstdint>

namespace simgpu {

enum class ActivityOp : uint8_t { Kernel, Memcpy, Memset };

// One op that ran on a stream, with device-clock (CLOCK_MONOTONIC based) start and end.
struct ActivityRecord {
  ActivityOp op = ActivityOp::Kernel;
  uint8_t copy_kind = 0;     // CUpti_ActivityMemcpyKind (memcpy)
  bool async = false;        // memcpy/memset: issued by an *Async call
  uint32_t correlation = 0;  // of the API call that queued it (the graph launch for a replay)
  uint32_t device = 0;
  uint32_t context = 0;
  uint32_t stream = 0;    // cuStreamGetId of its stream
  uint32_t graph_id = 0;  // 0 unless replayed by a graph launch
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t bytes = 0;          // memcpy/memset
  const void* func = nullptr;  // kernel: the CUfunction (a host function in the simulation)
  uint32_t value = 0;          // memset value
};

struct ActivitySink {
  // On the calling thread, when an API call queues a kernel, copy, memset or graph launch:
  // the correlation id the records it produces will carry.
  void (*issued)(uint32_t correlation);
  // On the stream's worker thread, after the op ran.
  void (*completed)(const ActivityRecord& r);
};

}  // namespace simgpu

// Installs (or, with nullptr, removes) the sink. Exported by the simulated libcuda.so.1.
extern "C" void simgpu_activity_set_sink(const simgpu::ActivitySink* sink);

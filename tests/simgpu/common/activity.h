// The simulated driver's activity feed, read by the simulated libcupti (cupti/). The real
// CUPTI learns about kernels, copies and memsets, and API calls, from inside the real driver and
// runtime; here libcuda exports simgpu_activity_set_sink, and libcupti installs a sink when an
// activity kind or a callback is enabled. Internal to the simulation: no program or hook ever sees this interface.
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

// The entry or exit of an API call the simulated libcupti can call back for (the kernel and
// graph launches and stream destroys of the runtime and the driver), on the calling thread.
// Every such call, and every call nested in it (the runtime's driver call), has the correlation
// id of the outermost one: the id its kernels' records carry, as with the real CUPTI.
struct ApiCall {
  uint32_t domain = 0;             // CUpti_CallbackDomain: CUPTI_CB_DOMAIN_DRIVER_API or _RUNTIME_API
  uint32_t cbid = 0;               // CUPTI_DRIVER_TRACE_CBID_* / CUPTI_RUNTIME_TRACE_CBID_*
  bool exit = false;               // false: the entry
  const char* function = nullptr;  // "cuLaunchKernel"
  const void* params = nullptr;    // the call's parameters, laid out as generated_*_meta.h's struct
  const void* status = nullptr;    // exit: the CUresult (driver) or cudaError_t (runtime) returned
  const void* kernel = nullptr;    // a kernel launch: the kernel (named for symbolName)
  void* context = nullptr;         // the calling thread's current CUcontext
  uint32_t correlation = 0;
  bool reported = false;  // the driver's: whether a sink was told of the entry
};

struct ActivitySink {
  // On the calling thread, when an API call queues a kernel, copy, memset or graph launch:
  // the correlation id the records it produces will carry.
  void (*issued)(uint32_t correlation);
  // On the stream's worker thread, after the op ran.
  void (*completed)(const ActivityRecord& r);
  // At the entry and exit of an API call (ApiCall).
  void (*api)(const ApiCall& call);
};

}  // namespace simgpu

// Installs (or, with nullptr, removes) the sink. Exported by the simulated libcuda.so.1.
extern "C" void simgpu_activity_set_sink(const simgpu::ActivitySink* sink);
// The simulated runtime's way to report its own API calls (exported by libcuda.so.1): enter
// fills call->correlation (a new id unless nested in another reported call) and calls the sink;
// exit calls it again and closes the call.
extern "C" void simgpu_api_enter(simgpu::ApiCall* call);
extern "C" void simgpu_api_exit(simgpu::ApiCall* call);

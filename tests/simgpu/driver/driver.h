// Internal model of the simulated driver (libcuda.so.1): devices, contexts, streams as
// worker threads, events as completion markers, graphs as recorded op lists.
#pragma once
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/activity.h"

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace simgpu::drv {

struct Context;
struct Stream;
struct EventState;
struct Graph;
struct GraphExec;

// ---- devices and contexts (device.cc) ----

struct Device {
  int ordinal = 0;
  uint64_t total_mem = 0;
  std::atomic<uint64_t> used{0};
  Context* primary = nullptr;  // created on first retain, never freed
  int primary_refs = 0;        // guarded by the driver mutex
  unsigned primary_flags = 0;
};

// cuInit's result (CUDA_ERROR_NOT_INITIALIZED before cuInit).
CUresult init_status();
int device_count();
Device* device(int ordinal);

struct Context {
  uint32_t magic;
  Device* dev;
  std::shared_ptr<Stream> legacy;
  std::mutex m;
  std::vector<std::weak_ptr<Stream>> streams;  // every stream but the legacy one

  void add_stream(const std::shared_ptr<Stream>& s);
  std::vector<std::shared_ptr<Stream>> live_streams();
  void synchronize();
};

// The calling thread's current context; when it has none, the first active primary
// context (lenient, so cuBLAS/NCCL called on a thread that never touched the runtime work).
Context* current_context();
Context* current_context_strict();
Context* as_context(CUcontext c);

// ---- streams (stream.cc) ----

enum class OpKind : uint8_t {
  Kernel,
  HostFn,
  Callback,
  Memcpy,
  Memset,
  Free,
  EventRecord,
  WaitEvent,
  WaitStream,
  GraphExec
};

// One queued operation. Plain fields keep the launch path allocation-light; `ref` keeps
// whatever the op points at (event, stream, graph, copied kernel parameters) alive.
struct Op {
  OpKind kind = OpKind::Kernel;
  void* a = nullptr;
  void* b = nullptr;
  uint64_t n = 0;
  uint64_t m = 0;
  int64_t enqueued_ns = 0;   // when the host queued it: the earliest the "device" may start it
  uint32_t correlation = 0;  // activity feed (common/activity.h): the queuing API call's id
  uint8_t copy_kind = 0;     // memcpy: CUpti_ActivityMemcpyKind
  bool sync = false;         // queued by a synchronous call (cuMemcpy, cuMemsetD8...)
  std::shared_ptr<void> ref;
};

struct Stream : std::enable_shared_from_this<Stream> {
  enum class Kind { Legacy, PerThread, User };

  uint32_t magic;
  Context* ctx = nullptr;
  Kind kind = Kind::User;
  unsigned flags = 0;
  int priority = 0;
  uint64_t id = 0;

  std::mutex m;
  std::condition_variable cv_work;
  std::condition_variable cv_done;
  std::deque<Op> q;
  std::atomic<uint64_t> enqueued{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<int64_t> device_time{0};  // device-clock end of the last completed op
  bool closing = false;
  std::shared_ptr<Graph> capture;  // guarded by m
  std::shared_ptr<Stream> self;    // the handle's ownership, dropped by cuStreamDestroy

  bool blocking() const { return kind == Kind::Legacy || !(flags & CU_STREAM_NON_BLOCKING); }
  // Appends without implicit synchronisation; returns the op's sequence number.
  uint64_t push(Op op);
  // Sequence number of the last queued op if some are not finished yet, else 0.
  uint64_t pending_target();
  void wait_for(uint64_t seq);
  bool idle() { return completed.load(std::memory_order_acquire) >= enqueued.load(std::memory_order_acquire); }
  void close();
  void run();
};

std::shared_ptr<Stream> make_stream(Context* ctx, Stream::Kind kind, unsigned flags, int priority);

// Resolves a handle: 0 / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD / a real stream.
// `ptds` makes 0 mean the per-thread default stream (the _ptsz entry points).
Stream* resolve_stream(CUstream h, bool ptds, CUresult* err);

// Enqueues with capture and legacy-stream semantics; returns the op's sequence number
// (0 when it went into a graph being captured).
uint64_t enqueue(Stream* s, Op op);
// Enqueue then wait (cuMemcpy & co.). Fails inside a capture.
CUresult enqueue_and_wait(Stream* s, Op op);

// Runs one op on the worker. `start` is its device-clock start; returns its device-clock end.
//
// Device clock: an op starts when the previous one ended or when it was queued, whichever is
// later, and lasts as long as its real work took, not counting the worker's wake-up latency.
// Kernels that sleep through simgpu_kernel_sleep_ns() last exactly what they asked for. Event
// stamps are device-clock times, so measured durations stay right on a busy host.
// Kernels, copies and memsets are then reported to the activity feed (common/activity.h).
int64_t execute(Stream& s, const Op& op, int64_t start);
int64_t execute_op(Stream& s, const Op& op, int64_t start);  // the same, unreported

// ---- events (event.cc) ----

struct EventState : std::enable_shared_from_this<EventState> {
  uint32_t magic;
  unsigned flags = 0;
  std::atomic<uint32_t> recorded{0};
  std::atomic<uint32_t> completed{0};
  std::atomic<int64_t> stamp_ns{0};
  std::mutex m;
  std::shared_ptr<Graph> capture;  // set when recorded inside a capture (guarded by m)
  std::shared_ptr<EventState> self;

  void complete(uint32_t gen, int64_t now);
  void wait(uint32_t gen);
};

EventState* as_event(CUevent e);

// ---- graphs (graph.cc) ----

struct Graph {
  uint32_t magic;
  std::mutex m;
  std::vector<Op> ops;
  bool capturing = false;
  Stream* origin = nullptr;
  uint64_t capture_id = 0;
  std::vector<std::shared_ptr<Stream>> members;
  std::shared_ptr<Graph> self;
};

struct GraphExec {
  uint32_t magic;
  std::vector<Op> ops;
  std::shared_ptr<GraphExec> self;
};

// ---- API calls the simulated libcupti calls back for (stream.cc, common/activity.h) ----

// Reports an API call's entry now and its exit when it ends (done() gives its status); the
// ops it enqueues carry its correlation id, or that of the call it is nested in.
class ApiScope {
 public:
  ApiScope(uint32_t domain, uint32_t cbid, const char* function, const void* params, const void* kernel = nullptr);
  ~ApiScope();
  CUresult done(CUresult r) {
    status_ = r;
    return r;
  }
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;

 private:
  ApiCall call_;
  CUresult status_ = CUDA_SUCCESS;
};

// ---- kernels (launch.cc) ----

// Copies kernelParams when the kernel exports its parameter sizes (simgpu/kernel.h).
std::shared_ptr<void> copy_params(void* fn, void** params, void** extra, void*** out);

// ---- memory (memory.cc) ----

void free_device_memory(void* p);
// CUpti_ActivityMemcpyKind of a copy from src to dst (HtoD, DtoH, DtoD, HtoH).
uint8_t copy_kind(const void* dst, const void* src);

constexpr uint32_t kCtxMagic = 0x43545831;
constexpr uint32_t kStreamMagic = 0x5354524d;
constexpr uint32_t kEventMagic = 0x45564e54;
constexpr uint32_t kGraphMagic = 0x47525048;
constexpr uint32_t kExecMagic = 0x47455845;

}  // namespace simgpu::drv

// Defines the legacy-default-stream entry point and its per-thread twin (_ptsz or
// _ptds), both forwarding to name##_impl(args..., per_thread).
#define SIMGPU_DEFINE_PT(name, suffix, PARAMS, ...)                              \
  SIMGPU_EXPORT CUresult name PARAMS { return name##_impl(__VA_ARGS__, false); } \
  SIMGPU_EXPORT CUresult name##suffix PARAMS { return name##_impl(__VA_ARGS__, true); }
#define SIMGPU_DEFINE_PTSZ(name, PARAMS, ...) SIMGPU_DEFINE_PT(name, _ptsz, PARAMS, __VA_ARGS__)
#define SIMGPU_DEFINE_PTDS(name, PARAMS, ...) SIMGPU_DEFINE_PT(name, _ptds, PARAMS, __VA_ARGS__)

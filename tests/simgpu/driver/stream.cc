// Streams: one worker thread each (the legacy default stream and every per-thread default
// stream too), a FIFO of ops, and the legacy stream's implicit synchronisation.
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/activity.h"
#include "common/simgpu_clock.h"
#include "common/control.h"
#include "driver/api_params.h"
#include "driver/driver.h"
#include "driver/named_kernel.h"
// After driver.h, which selects the API version cuda.h declares.
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>

namespace simgpu::drv {
namespace {

std::atomic<uint64_t> g_next_stream_id{1};

// The activity feed (common/activity.h): correlation ids of the API calls that queue work, and
// the sink the simulated libcupti installs (null: nobody listens, nothing is reported).
std::atomic<uint32_t> g_next_correlation{1};
std::atomic<const ActivitySink*> g_sink{nullptr};

// The reported API call (ApiCall) this thread is in: how deeply nested, and its correlation id.
struct ApiState {
  int depth = 0;
  uint32_t correlation = 0;
};
thread_local ApiState tls_api;

// Nothing to do (one load) while no simulated libcupti listens: the ops get their own ids.
void api_enter(ApiCall* call) {
  const ActivitySink* sink = g_sink.load(std::memory_order_acquire);
  call->reported = sink != nullptr && sink->api != nullptr;
  if (!call->reported) return;
  if (tls_api.depth++ == 0) tls_api.correlation = g_next_correlation.fetch_add(1, std::memory_order_relaxed);
  call->correlation = tls_api.correlation;
  call->exit = false;
  if (call->context == nullptr) call->context = reinterpret_cast<void*>(current_context());
  sink->api(*call);
}

void api_exit(ApiCall* call) {
  if (!call->reported) return;
  call->exit = true;
  const ActivitySink* sink = g_sink.load(std::memory_order_acquire);
  if (sink != nullptr && sink->api != nullptr) sink->api(*call);
  --tls_api.depth;
}

bool reports_activity(OpKind k) {
  return k == OpKind::Kernel || k == OpKind::Memcpy || k == OpKind::Memset || k == OpKind::GraphExec;
}

// Per-thread default streams die with their thread (after draining, like the real ones).
struct PtdsHolder {
  std::vector<std::shared_ptr<Stream>> streams;
  ~PtdsHolder() {
    for (auto& s : streams) s->close();
  }
};
thread_local PtdsHolder tls_ptds;

Stream* per_thread_stream(Context* c) {
  for (auto& s : tls_ptds.streams)
    if (s->ctx == c) return s.get();
  auto s = make_stream(c, Stream::Kind::PerThread, 0, 0);
  c->add_stream(s);
  tls_ptds.streams.push_back(s);
  return s.get();
}

}  // namespace

std::shared_ptr<Stream> make_stream(Context* ctx, Stream::Kind kind, unsigned flags, int priority) {
  auto s = std::make_shared<Stream>();
  s->magic = kStreamMagic;
  s->ctx = ctx;
  s->kind = kind;
  s->flags = flags;
  s->priority = priority;
  s->id = g_next_stream_id.fetch_add(1);
  std::thread([s] { s->run(); }).detach();
  return s;
}

void Stream::run() {
  // 1 ns timer slack: simulated kernels sleep to absolute deadlines and must wake on time.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  char name[16];
  const char* kinds[] = {"legacy", "ptds", "stream"};
  snprintf(name, sizeof name, "sgpu-%s-%llu", kinds[int(kind)], (unsigned long long)id);
  pthread_setname_np(pthread_self(), name);
  int64_t clock = 0;  // this stream's device clock
  for (;;) {
    Op op;
    {
      std::unique_lock lk(m);
      cv_work.wait(lk, [&] { return !q.empty() || closing; });
      if (q.empty()) break;
      op = std::move(q.front());
      q.pop_front();
    }
    clock = execute(*this, op, std::max(clock, op.enqueued_ns));
    device_time.store(clock, std::memory_order_release);
    op = Op{};
    {
      std::lock_guard lk(m);
      completed.fetch_add(1, std::memory_order_release);
    }
    cv_done.notify_all();
  }
}

uint64_t Stream::push(Op op) {
  op.enqueued_ns = now_ns();
  uint64_t seq;
  {
    std::lock_guard lk(m);
    q.push_back(std::move(op));
    seq = enqueued.fetch_add(1, std::memory_order_release) + 1;
  }
  cv_work.notify_one();
  return seq;
}

uint64_t Stream::pending_target() {
  uint64_t e = enqueued.load(std::memory_order_acquire);
  return completed.load(std::memory_order_acquire) >= e ? 0 : e;
}

void Stream::wait_for(uint64_t seq) {
  if (completed.load(std::memory_order_acquire) >= seq) return;
  std::unique_lock lk(m);
  cv_done.wait(lk, [&] { return completed.load(std::memory_order_acquire) >= seq; });
}

void Stream::close() {
  {
    std::lock_guard lk(m);
    closing = true;
  }
  cv_work.notify_all();
}

Stream* resolve_stream(CUstream h, bool ptds, CUresult* err) {
  *err = CUDA_SUCCESS;
  if (h == nullptr) h = ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    Context* c = current_context();
    if (!c) {
      *err = CUDA_ERROR_INVALID_CONTEXT;
      return nullptr;
    }
    return h == CU_STREAM_LEGACY ? c->legacy.get() : per_thread_stream(c);
  }
  auto* s = reinterpret_cast<Stream*>(h);
  if (s->magic != kStreamMagic) {
    *err = CUDA_ERROR_INVALID_HANDLE;
    return nullptr;
  }
  return s;
}

uint64_t enqueue(Stream* s, Op op) {
  if (reports_activity(op.kind)) {
    op.correlation =
        tls_api.depth > 0 ? tls_api.correlation : g_next_correlation.fetch_add(1, std::memory_order_relaxed);
    if (const ActivitySink* sink = g_sink.load(std::memory_order_acquire)) sink->issued(op.correlation);
  }
  {
    std::unique_lock lk(s->m);
    if (s->capture) {
      auto g = s->capture;
      lk.unlock();
      std::lock_guard gl(g->m);
      g->ops.push_back(std::move(op));
      return 0;
    }
  }
  // Legacy default stream semantics: it waits for all blocking streams, and they wait for it.
  Context* c = s->ctx;
  if (s->kind == Stream::Kind::Legacy) {
    for (auto& t : c->live_streams()) {
      if (!t->blocking()) continue;
      if (uint64_t target = t->pending_target()) {
        Op w;
        w.kind = OpKind::WaitStream;
        w.n = target;
        w.ref = t;
        s->push(std::move(w));
      }
    }
  } else if (s->blocking()) {
    if (uint64_t target = c->legacy->pending_target()) {
      Op w;
      w.kind = OpKind::WaitStream;
      w.n = target;
      w.ref = c->legacy;
      s->push(std::move(w));
    }
  }
  return s->push(std::move(op));
}

CUresult enqueue_and_wait(Stream* s, Op op) {
  {
    std::lock_guard lk(s->m);
    if (s->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  op.sync = true;
  uint64_t seq = enqueue(s, std::move(op));
  s->wait_for(seq);
  return CUDA_SUCCESS;
}

namespace {

// How long this worker thread has waited for a CPU while runnable (the run-queue delay, second
// field of /proc/thread-self/schedstat), or 0 where the kernel does not say. A device does not
// stop when the host's scheduler runs something else: this time is taken out of the ops' own work.
class RunDelay {
 public:
  RunDelay() : fd_(open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~RunDelay() {
    if (fd_ >= 0) close(fd_);
  }
  int64_t ns() const {
    char buf[96];
    const ssize_t n = fd_ >= 0 ? pread(fd_, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return 0;
    buf[n] = 0;  // "<on-cpu ns> <run-queue ns> <timeslices>"
    const char* space = strchr(buf, ' ');
    return space != nullptr ? strtoll(space + 1, nullptr, 10) : 0;
  }

 private:
  int fd_;  // of this thread (opened through thread-self on it): used on it only
};
thread_local RunDelay tls_run_delay;

// A point from which a kernel's own work is measured: real time, and the run-queue delay so far.
// Only a modelled kernel's (one that sleeps with simgpu_kernel_sleep_ns) time leaves the waits
// for a CPU out: one that blocks on something real (a peer, a flag, an absolute deadline) may
// have waited for a CPU before its wait, which did not make it end later.
struct WorkMark {
  int64_t real = 0;
  int64_t waited = 0;
};
WorkMark work_mark() { return WorkMark{now_ns(), tls_run_delay.ns()}; }
// The op's own work since `m`: the real time, less what the worker spent waiting for a CPU.
int64_t work_since(const WorkMark& m) {
  const WorkMark now = work_mark();
  return std::max<int64_t>(0, (now.real - m.real) - (now.waited - m.waited));
}

// The kernel running on this worker thread, for simgpu_kernel_sleep_ns.
struct KernelClock {
  bool active = false;
  bool modelled = false;  // it called simgpu_kernel_sleep_ns: its time is its sleeps plus its work
  int64_t cursor = 0;     // device time reached so far
  WorkMark mark;          // up to which cursor accounts for the kernel's work
};
thread_local KernelClock tls_kernel;

// While a graph replays on this worker: its launch's correlation id and the graph's id.
struct Replay {
  uint32_t correlation = 0;
  uint32_t graph_id = 0;
};
thread_local Replay tls_replay;

// Reports a kernel, copy or memset that ran from `start` to `end` (device clock).
void report(const Stream& s, const Op& op, int64_t start, int64_t end) {
  const ActivitySink* sink = g_sink.load(std::memory_order_acquire);
  if (sink == nullptr) return;
  ActivityRecord r;
  r.op = op.kind == OpKind::Kernel   ? ActivityOp::Kernel
         : op.kind == OpKind::Memcpy ? ActivityOp::Memcpy
                                     : ActivityOp::Memset;
  r.copy_kind = op.copy_kind;
  r.async = !op.sync;
  r.correlation = tls_replay.correlation ? tls_replay.correlation : op.correlation;
  r.graph_id = tls_replay.graph_id;
  r.device = uint32_t(s.ctx->dev->ordinal);
  r.context = r.device + 1;
  r.stream = uint32_t(s.id);
  r.start_ns = start;
  r.end_ns = end;
  if (op.kind == OpKind::Kernel) r.func = op.a;
  if (op.kind == OpKind::Memcpy) r.bytes = op.n;
  if (op.kind == OpKind::Memset) {
    r.bytes = op.n * (op.m >> 32);
    r.value = uint32_t(op.m);
  }
  sink->completed(r);
}

}  // namespace

ApiScope::ApiScope(uint32_t domain, uint32_t cbid, const char* function, const void* params, const void* kernel) {
  call_.domain = domain;
  call_.cbid = cbid;
  call_.function = function;
  call_.params = params;
  call_.kernel = kernel;
  api_enter(&call_);
}

ApiScope::~ApiScope() {
  call_.status = &status_;
  api_exit(&call_);
}

int64_t execute(Stream& s, const Op& op, int64_t start) {
  const int64_t end = execute_op(s, op, start);
  if (op.kind == OpKind::Kernel || op.kind == OpKind::Memcpy || op.kind == OpKind::Memset) report(s, op, start, end);
  return end;
}

int64_t execute_op(Stream& s, const Op& op, int64_t start) {
  const WorkMark t0 = work_mark();
  switch (op.kind) {
    case OpKind::Kernel: {
      if (const NamedKernel* named = as_named_kernel(op.a)) return run_named_kernel(*named, op.n, start);
      KernelClock& k = tls_kernel;
      const KernelClock outer = k;
      k = KernelClock{true, false, start, t0};
      reinterpret_cast<void (*)(void**)>(op.a)(static_cast<void**>(op.b));
      const int64_t end = k.cursor + (k.modelled ? work_since(k.mark) : now_ns() - k.mark.real);
      k = outer;
      return end;
    }
    case OpKind::HostFn: reinterpret_cast<CUhostFn>(op.a)(op.b); break;
    case OpKind::Callback:
      reinterpret_cast<CUstreamCallback>(op.a)(reinterpret_cast<CUstream>(op.m), CUDA_SUCCESS, op.b);
      break;
    case OpKind::Memcpy:
      if (op.n) memmove(op.a, op.b, op.n);
      break;
    case OpKind::Memset: {
      const unsigned elem = unsigned(op.m >> 32);
      const uint32_t v = uint32_t(op.m);
      if (elem == 1) {
        memset(op.a, int(v & 0xff), op.n);
      } else if (elem == 2) {
        auto* p = static_cast<uint16_t*>(op.a);
        for (uint64_t i = 0; i < op.n; ++i) p[i] = uint16_t(v);
      } else {
        auto* p = static_cast<uint32_t*>(op.a);
        for (uint64_t i = 0; i < op.n; ++i) p[i] = v;
      }
      break;
    }
    case OpKind::Free: free_device_memory(op.a); break;
    case OpKind::EventRecord: static_cast<EventState*>(op.ref.get())->complete(uint32_t(op.n), start); return start;
    case OpKind::WaitEvent: {
      auto* e = static_cast<EventState*>(op.ref.get());
      e->wait(uint32_t(op.n));
      return std::max(start, e->stamp_ns.load(std::memory_order_relaxed));
    }
    case OpKind::WaitStream: {
      auto* t = static_cast<Stream*>(op.ref.get());
      t->wait_for(op.n);
      return std::max(start, t->device_time.load(std::memory_order_acquire));
    }
    case OpKind::GraphExec: {
      const Replay outer = tls_replay;
      if (outer.correlation == 0)
        tls_replay = Replay{op.correlation, uint32_t(reinterpret_cast<uintptr_t>(op.ref.get()) >> 4)};
      int64_t clock = start;
      for (const Op& o : static_cast<GraphExec*>(op.ref.get())->ops) clock = execute(s, o, clock);
      tls_replay = outer;
      return clock;
    }
  }
  return start + (now_ns() - t0.real);
}

}  // namespace simgpu::drv

using namespace simgpu::drv;

#define SIMGPU_STREAM_OR_RETURN(var, h, ptds)   \
  if (CUresult st_ = init_status()) return st_; \
  CUresult err_;                                \
  Stream* var = resolve_stream(h, ptds, &err_); \
  if (!var) return err_;

namespace {

CUresult stream_create(CUstream* ph, unsigned flags, int priority) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  if (flags & ~unsigned(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = current_context();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  auto s = make_stream(c, Stream::Kind::User, flags, priority < -5 ? -5 : (priority > 0 ? 0 : priority));
  s->self = s;
  c->add_stream(s);
  *ph = reinterpret_cast<CUstream>(s.get());
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize_impl(CUstream h, bool ptds) {
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  {
    std::lock_guard lk(s->m);
    if (s->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  s->wait_for(s->enqueued.load(std::memory_order_acquire));
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery_impl(CUstream h, bool ptds) {
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  {
    std::lock_guard lk(s->m);
    if (s->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return s->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuStreamGetFlags_impl(CUstream h, unsigned* flags, bool ptds) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  *flags = s->flags;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority_impl(CUstream h, int* prio, bool ptds) {
  if (!prio) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  *prio = s->priority;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetId_impl(CUstream h, unsigned long long* id, bool ptds) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  *id = s->id;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx_impl(CUstream h, CUcontext* pctx, bool ptds) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  *pctx = reinterpret_cast<CUcontext>(s->ctx);
  return CUDA_SUCCESS;
}

CUresult cuStreamGetDevice_impl(CUstream h, CUdevice* dev, bool ptds) {
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  *dev = s->ctx->dev->ordinal;
  return CUDA_SUCCESS;
}

CUresult cuStreamAddCallback_impl(CUstream h, CUstreamCallback cb, void* user, unsigned flags, bool ptds) {
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  Op op;
  op.kind = OpKind::Callback;
  op.a = reinterpret_cast<void*>(cb);
  op.b = user;
  op.m = reinterpret_cast<uint64_t>(h);
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult cuLaunchHostFunc_impl(CUstream h, CUhostFn fn, void* user, bool ptds) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_STREAM_OR_RETURN(s, h, ptds);
  Op op;
  op.kind = OpKind::HostFn;
  op.a = reinterpret_cast<void*>(fn);
  op.b = user;
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuStreamCreate(CUstream* ph, unsigned int flags) { return stream_create(ph, flags, 0); }

SIMGPU_EXPORT CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  return stream_create(ph, flags, priority);
}

// Like the real driver: returns at once; queued work still runs, then the worker exits.
namespace {
CUresult stream_destroy(CUstream h) {
  if (CUresult st = init_status()) return st;
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  auto* s = reinterpret_cast<Stream*>(h);
  if (s->magic != kStreamMagic || s->kind != Stream::Kind::User) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> hold = std::move(s->self);
  if (!hold) return CUDA_ERROR_INVALID_HANDLE;
  hold->close();
  return CUDA_SUCCESS;
}
}  // namespace

SIMGPU_EXPORT CUresult cuStreamDestroy_v2(CUstream h) {
  StreamDestroyParams p{h};
  ApiScope api(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2, "cuStreamDestroy_v2", &p);
  return api.done(stream_destroy(h));
}
SIMGPU_EXPORT CUresult cuStreamDestroy(CUstream h) { return cuStreamDestroy_v2(h); }

SIMGPU_EXPORT void simgpu_activity_set_sink(const simgpu::ActivitySink* sink) {
  simgpu::drv::g_sink.store(sink, std::memory_order_release);
}

SIMGPU_EXPORT void simgpu_api_enter(simgpu::ApiCall* call) { simgpu::drv::api_enter(call); }
SIMGPU_EXPORT void simgpu_api_exit(simgpu::ApiCall* call) { simgpu::drv::api_exit(call); }

SIMGPU_DEFINE_PTSZ(cuStreamSynchronize, (CUstream h), h)
SIMGPU_DEFINE_PTSZ(cuStreamQuery, (CUstream h), h)
SIMGPU_DEFINE_PTSZ(cuStreamGetFlags, (CUstream h, unsigned int* flags), h, flags)
SIMGPU_DEFINE_PTSZ(cuStreamGetPriority, (CUstream h, int* priority), h, priority)
SIMGPU_DEFINE_PTSZ(cuStreamGetId, (CUstream h, unsigned long long* id), h, id)
SIMGPU_DEFINE_PTSZ(cuStreamGetCtx, (CUstream h, CUcontext* pctx), h, pctx)
SIMGPU_DEFINE_PTSZ(cuStreamGetDevice, (CUstream h, CUdevice* dev), h, dev)
SIMGPU_DEFINE_PTSZ(cuStreamAddCallback, (CUstream h, CUstreamCallback cb, void* user, unsigned int flags), h, cb, user,
                   flags)
SIMGPU_DEFINE_PTSZ(cuLaunchHostFunc, (CUstream h, CUhostFn fn, void* user), h, fn, user)

// Sleeps `ns` of device time inside a kernel (simgpu/kernel.h: simgpu_sleep_ns). The real
// sleep ends at an absolute deadline on the device clock (or not at all within kDeviceLeadNs
// of it: common/simgpu_clock.h), so a worker that started late catches up, and the kernel's
// device-clock duration is exactly what it slept plus its own work (without the time its
// worker waited for a CPU). Outside a kernel it is a plain sleep. Inside one, a slow GPU
// injected through SIMGPU_CONTROL (common/control.h, gpu_factor) stretches it.
SIMGPU_EXPORT void simgpu_kernel_sleep_ns(int64_t ns) {
  using namespace simgpu;
  auto& k = simgpu::drv::tls_kernel;
  if (ns < 0) ns = 0;
  if (!k.active) {
    sleep_until_ns(now_ns() + ns);
    return;
  }
  ns = int64_t(double(ns) * current_faults().gpu_factor);
  k.modelled = true;
  k.cursor += work_since(k.mark) + ns;
  device_sleep_until_ns(k.cursor);
  k.mark = simgpu::drv::work_mark();
}

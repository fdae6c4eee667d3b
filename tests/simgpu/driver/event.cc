// Events: a record enqueues a marker; the stream's worker stamps CLOCK_MONOTONIC when it
// reaches it. Waiting blocks on the `completed` word (futex), never spins.
#include "driver/driver.h"

namespace simgpu::drv {

void EventState::complete(uint32_t gen, int64_t now) {
  stamp_ns.store(now, std::memory_order_relaxed);
  uint32_t c = completed.load(std::memory_order_relaxed);
  while (c < gen && !completed.compare_exchange_weak(c, gen, std::memory_order_release)) {
  }
  completed.notify_all();
}

void EventState::wait(uint32_t gen) {
  uint32_t c;
  while ((c = completed.load(std::memory_order_acquire)) < gen) completed.wait(c, std::memory_order_acquire);
}

EventState* as_event(CUevent e) {
  auto* ev = reinterpret_cast<EventState*>(e);
  return (ev && ev->magic == kEventMagic) ? ev : nullptr;
}

}  // namespace simgpu::drv

using namespace simgpu::drv;

namespace {

CUresult cuEventRecordWithFlags_impl(CUevent e, CUstream h, unsigned flags, bool ptds) {
  if (CUresult st = init_status()) return st;
  EventState* ev = as_event(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  {
    std::unique_lock lk(s->m);
    if (s->capture) {
      // Inside a capture the record only marks a dependency other streams may join on.
      auto g = s->capture;
      lk.unlock();
      std::lock_guard el(ev->m);
      ev->capture = g;
      return CUDA_SUCCESS;
    }
  }
  {
    std::lock_guard el(ev->m);
    ev->capture.reset();
  }
  Op op;
  op.kind = OpKind::EventRecord;
  op.n = ev->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
  op.ref = ev->shared_from_this();
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult cuEventRecord_impl(CUevent e, CUstream h, bool ptds) { return cuEventRecordWithFlags_impl(e, h, 0, ptds); }

CUresult cuStreamWaitEvent_impl(CUstream h, CUevent e, unsigned flags, bool ptds) {
  if (CUresult st = init_status()) return st;
  EventState* ev = as_event(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  std::shared_ptr<Graph> g;
  {
    std::lock_guard el(ev->m);
    g = ev->capture;
  }
  if (g) {
    std::lock_guard gl(g->m);
    if (g->capturing) {
      // Fork into the capture: from now on this stream's work is recorded into g too.
      std::lock_guard sl(s->m);
      if (!s->capture) {
        s->capture = g;
        g->members.push_back(s->shared_from_this());
      }
      return CUDA_SUCCESS;
    }
  }
  {
    std::lock_guard sl(s->m);
    if (s->capture) return CUDA_SUCCESS;  // dependency on work outside the capture
  }
  const uint32_t gen = ev->recorded.load(std::memory_order_acquire);
  if (gen == 0) return CUDA_SUCCESS;
  Op op;
  op.kind = OpKind::WaitEvent;
  op.n = gen;
  op.ref = ev->shared_from_this();
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuEventCreate(CUevent* pe, unsigned int flags) {
  if (!pe) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  auto ev = std::make_shared<EventState>();
  ev->magic = kEventMagic;
  ev->flags = flags;
  ev->self = ev;
  *pe = reinterpret_cast<CUevent>(ev.get());
  return CUDA_SUCCESS;
}

// Pending records keep the state alive; destroying early is legal, as on hardware.
SIMGPU_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  if (CUresult st = init_status()) return st;
  EventState* ev = as_event(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<EventState> hold = std::move(ev->self);
  if (!hold) return CUDA_ERROR_INVALID_HANDLE;
  hold->magic = 0;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

SIMGPU_DEFINE_PTSZ(cuEventRecord, (CUevent e, CUstream h), e, h)
SIMGPU_DEFINE_PTSZ(cuEventRecordWithFlags, (CUevent e, CUstream h, unsigned int flags), e, h, flags)
SIMGPU_DEFINE_PTSZ(cuStreamWaitEvent, (CUstream h, CUevent e, unsigned int flags), h, e, flags)

SIMGPU_EXPORT CUresult cuEventQuery(CUevent e) {
  if (CUresult st = init_status()) return st;
  EventState* ev = as_event(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  return ev->completed.load(std::memory_order_acquire) >= ev->recorded.load(std::memory_order_acquire)
             ? CUDA_SUCCESS
             : CUDA_ERROR_NOT_READY;
}

SIMGPU_EXPORT CUresult cuEventSynchronize(CUevent e) {
  if (CUresult st = init_status()) return st;
  EventState* ev = as_event(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  ev->wait(ev->recorded.load(std::memory_order_acquire));
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  EventState* a = as_event(start);
  EventState* b = as_event(end);
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  const uint32_t ra = a->recorded.load(std::memory_order_acquire);
  const uint32_t rb = b->recorded.load(std::memory_order_acquire);
  if (ra == 0 || rb == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (a->completed.load(std::memory_order_acquire) < ra || b->completed.load(std::memory_order_acquire) < rb)
    return CUDA_ERROR_NOT_READY;
  *ms = float(double(b->stamp_ns.load() - a->stamp_ns.load()) / 1e6);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

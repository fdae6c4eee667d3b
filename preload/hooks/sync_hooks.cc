// Synchronising calls: the host thread waits here for the GPU. They are not timed as ops; the
// watchdog only needs to know that a thread is blocked and since when.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "preload/base/real_function.h"
#include "preload/hang/blocked_threads.h"
#include "preload/start/tracker.h"

namespace xtimer {
namespace {

template <typename Fn, typename Status, typename... Args>
Status Blocking(RealFunction<Fn>& real, Status missing, Args... args) {
  Fn fn = real.get_or_report();
  if (fn == nullptr) return missing;
  Tracker::Instance();  // a first CUDA call that is a sync still starts the watchdog
  BlockedThreads::Scope scope(real.name());
  return fn(args...);
}

RealFunction<decltype(&::cudaStreamSynchronize)> real_stream_sync("cudaStreamSynchronize", Lib::kCudart);
RealFunction<decltype(&::cudaStreamSynchronize)> real_stream_sync_ptsz("cudaStreamSynchronize_ptsz", Lib::kCudart);
RealFunction<decltype(&::cudaDeviceSynchronize)> real_device_sync("cudaDeviceSynchronize", Lib::kCudart);
RealFunction<decltype(&::cudaEventSynchronize)> real_event_sync("cudaEventSynchronize", Lib::kCudart);
RealFunction<decltype(&::cudaMemcpy)> real_memcpy("cudaMemcpy", Lib::kCudart);
RealFunction<decltype(&::cudaMemcpy)> real_memcpy_ptds("cudaMemcpy_ptds", Lib::kCudart);
RealFunction<CUresult (*)(CUstream)> real_cu_stream_sync("cuStreamSynchronize", Lib::kCuda);
RealFunction<CUresult (*)(CUstream)> real_cu_stream_sync_ptsz("cuStreamSynchronize_ptsz", Lib::kCuda);
RealFunction<CUresult (*)()> real_cu_ctx_sync("cuCtxSynchronize", Lib::kCuda);
RealFunction<CUresult (*)(CUevent)> real_cu_event_sync("cuEventSynchronize", Lib::kCuda);

}  // namespace
}  // namespace xtimer

using namespace xtimer;

XTIMER_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return Blocking(real_stream_sync, cudaErrorInitializationError, s);
}
XTIMER_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return Blocking(real_stream_sync_ptsz, cudaErrorInitializationError, s);
}
XTIMER_EXPORT cudaError_t cudaDeviceSynchronize() { return Blocking(real_device_sync, cudaErrorInitializationError); }
XTIMER_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return Blocking(real_event_sync, cudaErrorInitializationError, e);
}
XTIMER_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return Blocking(real_memcpy, cudaErrorInitializationError, dst, src, n, kind);
}
XTIMER_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return Blocking(real_memcpy_ptds, cudaErrorInitializationError, dst, src, n, kind);
}
XTIMER_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  return Blocking(real_cu_stream_sync, CUDA_ERROR_NOT_INITIALIZED, s);
}
XTIMER_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
  return Blocking(real_cu_stream_sync_ptsz, CUDA_ERROR_NOT_INITIALIZED, s);
}
XTIMER_EXPORT CUresult cuCtxSynchronize() { return Blocking(real_cu_ctx_sync, CUDA_ERROR_NOT_INITIALIZED); }
XTIMER_EXPORT CUresult cuEventSynchronize(CUevent e) {
  return Blocking(real_cu_event_sync, CUDA_ERROR_NOT_INITIALIZED, e);
}

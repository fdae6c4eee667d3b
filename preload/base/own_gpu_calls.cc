#include "preload/base/own_gpu_calls.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "preload/base/real_function.h"

namespace xtimer::gpu {
namespace {

XTIMER_REAL(kCudart, cudaGetDevice);
XTIMER_REAL(kCudart, cudaSetDevice);
XTIMER_REAL(kCudart, cudaEventCreateWithFlags);
XTIMER_REAL(kCudart, cudaEventRecord);
XTIMER_REAL(kCudart, cudaEventQuery);
XTIMER_REAL(kCudart, cudaEventElapsedTime);
XTIMER_REAL(kCudart, cudaEventDestroy);
XTIMER_REAL(kCudart, cudaGetLastError);
XTIMER_REAL(kCudart, cudaStreamCreateWithFlags);
// The driver functions by their ABI names (cuda.h maps some names to _v2 forms by macro).
RealFunction<CUresult (*)(CUdevice*)> real_cuCtxGetDevice("cuCtxGetDevice", Lib::kCuda);
RealFunction<CUresult (*)(CUevent*, unsigned)> real_cuEventCreate("cuEventCreate", Lib::kCuda);
RealFunction<CUresult (*)(CUevent, CUstream)> real_cuEventRecord("cuEventRecord", Lib::kCuda);
RealFunction<CUresult (*)(CUevent, CUstream)> real_cuEventRecord_ptsz("cuEventRecord_ptsz", Lib::kCuda);
RealFunction<CUresult (*)(CUevent)> real_cuEventQuery("cuEventQuery", Lib::kCuda);
RealFunction<CUresult (*)(float*, CUevent, CUevent)> real_cuEventElapsedTime("cuEventElapsedTime_v2", Lib::kCuda);
RealFunction<CUresult (*)(float*, CUevent, CUevent)> real_cuEventElapsedTime_v1("cuEventElapsedTime", Lib::kCuda);
RealFunction<CUresult (*)(CUevent)> real_cuEventDestroy("cuEventDestroy_v2", Lib::kCuda);
RealFunction<CUresult (*)(CUcontext*, CUdevice)> real_cuDevicePrimaryCtxRetain("cuDevicePrimaryCtxRetain", Lib::kCuda);
RealFunction<CUresult (*)(CUcontext)> real_cuCtxSetCurrent("cuCtxSetCurrent", Lib::kCuda);
RealFunction<CUresult (*)(CUstream)> real_cuStreamQuery("cuStreamQuery", Lib::kCuda);
RealFunction<CUresult (*)(CUcontext)> real_cuCtxPushCurrent("cuCtxPushCurrent_v2", Lib::kCuda);
RealFunction<CUresult (*)(CUcontext*)> real_cuCtxPopCurrent("cuCtxPopCurrent_v2", Lib::kCuda);

bool HaveRuntime() { return real_cudaEventQuery.get() != nullptr; }

// Makes `device` current on this thread (the poller) through the runtime, else the driver's
// primary context.
bool SelectDevice(int device) {
  if (auto f = real_cudaSetDevice.get()) return f(device) == cudaSuccess;
  CUcontext ctx = nullptr;
  auto retain = real_cuDevicePrimaryCtxRetain.get();
  auto set = real_cuCtxSetCurrent.get();
  return retain && set && retain(&ctx, device) == CUDA_SUCCESS && set(ctx) == CUDA_SUCCESS;
}

}  // namespace

bool Available() { return HaveRuntime() || real_cuEventQuery.get() != nullptr; }

int CurrentDevice(Path path) {
  if (path == Path::kRuntime) {
    int d = -1;
    if (auto f = real_cudaGetDevice.get(); f && f(&d) == cudaSuccess) return d;
    return -1;
  }
  CUdevice d = -1;
  if (auto f = real_cuCtxGetDevice.get(); f && f(&d) == CUDA_SUCCESS) return d;
  return -1;
}

Event CreateEvent(int device, Path path, bool switch_device) {
  if (switch_device && !SelectDevice(device)) return nullptr;
  if (path == Path::kRuntime && HaveRuntime()) {
    cudaEvent_t e = nullptr;
    auto f = real_cudaEventCreateWithFlags.get();
    if (f && f(&e, cudaEventDefault) == cudaSuccess) return e;
    if (auto clear = real_cudaGetLastError.get()) clear();
    return nullptr;
  }
  CUevent e = nullptr;
  auto f = real_cuEventCreate.get();
  if (f && f(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS) return e;
  return nullptr;
}

bool Record(Event e, Stream stream, Path path, bool per_thread) {
  if (path == Path::kRuntime) {
    // cudaEventRecord is the non-ptsz form: stream 0 is the legacy stream, so name the
    // per-thread stream explicitly for _ptsz callers.
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (per_thread && s == nullptr) s = cudaStreamPerThread;
    auto f = real_cudaEventRecord.get();
    if (f && f(static_cast<cudaEvent_t>(e), s) == cudaSuccess) return true;
    if (auto clear = real_cudaGetLastError.get()) clear();
    return false;
  }
  auto f = per_thread ? real_cuEventRecord_ptsz.get() : real_cuEventRecord.get();
  return f && f(static_cast<CUevent>(e), static_cast<CUstream>(stream)) == CUDA_SUCCESS;
}

Query QueryEvent(Event e) {
  if (HaveRuntime()) {
    cudaError_t r = real_cudaEventQuery.get()(static_cast<cudaEvent_t>(e));
    if (r == cudaSuccess) return Query::kDone;
    if (r == cudaErrorNotReady) return Query::kNotReady;
    return Query::kError;
  }
  auto f = real_cuEventQuery.get();
  if (f == nullptr) return Query::kError;
  CUresult r = f(static_cast<CUevent>(e));
  if (r == CUDA_SUCCESS) return Query::kDone;
  if (r == CUDA_ERROR_NOT_READY) return Query::kNotReady;
  return Query::kError;
}

Query QueryStream(Stream stream, void* context) {
  auto query = real_cuStreamQuery.get();
  if (query == nullptr) return Query::kError;
  CUresult r;
  if (stream != nullptr) {
    r = query(static_cast<CUstream>(stream));
  } else {
    auto push = real_cuCtxPushCurrent.get();
    auto pop = real_cuCtxPopCurrent.get();
    if (context == nullptr || push == nullptr || pop == nullptr) return Query::kError;
    if (push(static_cast<CUcontext>(context)) != CUDA_SUCCESS) return Query::kError;
    r = query(CU_STREAM_LEGACY);
    CUcontext popped = nullptr;
    pop(&popped);
  }
  if (r == CUDA_SUCCESS) return Query::kDone;
  if (r == CUDA_ERROR_NOT_READY) return Query::kNotReady;
  return Query::kError;
}

double ElapsedMs(Event start, Event end) {
  double ms = -1;
  return ElapsedMs(start, end, &ms) == Query::kDone && ms >= 0 ? ms : -1;
}

Query ElapsedMs(Event start, Event end, double* ms) {
  float f_ms = 0;
  if (HaveRuntime()) {
    auto f = real_cudaEventElapsedTime.get();
    if (!f) return Query::kError;
    cudaError_t r = f(&f_ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
    if (r != cudaSuccess) return r == cudaErrorNotReady ? Query::kNotReady : Query::kError;
  } else {
    auto f = real_cuEventElapsedTime.get();
    if (f == nullptr) f = real_cuEventElapsedTime_v1.get();
    if (!f) return Query::kError;
    CUresult r = f(&f_ms, static_cast<CUevent>(start), static_cast<CUevent>(end));
    if (r != CUDA_SUCCESS) return r == CUDA_ERROR_NOT_READY ? Query::kNotReady : Query::kError;
  }
  *ms = f_ms;
  return Query::kDone;
}

void DestroyEvent(Event e) {
  if (e == nullptr) return;
  if (HaveRuntime()) {
    if (auto f = real_cudaEventDestroy.get()) f(static_cast<cudaEvent_t>(e));
    return;
  }
  if (auto f = real_cuEventDestroy.get()) f(static_cast<CUevent>(e));
}

Stream CreatePrivateStream(int device) {
  if (!SelectDevice(device)) return nullptr;
  cudaStream_t s = nullptr;
  auto f = real_cudaStreamCreateWithFlags.get();
  if (f && f(&s, cudaStreamNonBlocking) == cudaSuccess) return s;
  return nullptr;
}

}  // namespace xtimer::gpu

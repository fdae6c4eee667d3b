// Whether a stream is capturing, and the capture mode of the library's own threads.
#include "preload/graphs/capture_mode.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "preload/base/real_function.h"

namespace xtimer {
namespace {
XTIMER_REAL(kCudart, cudaStreamIsCapturing);
XTIMER_REAL(kCudart, cudaThreadExchangeStreamCaptureMode);
RealFunction<CUresult (*)(CUstream, CUstreamCaptureStatus*)> real_cuStreamIsCapturing("cuStreamIsCapturing",
                                                                                      Lib::kCuda);
RealFunction<CUresult (*)(CUstream, CUstreamCaptureStatus*)> real_cuStreamIsCapturing_ptsz("cuStreamIsCapturing_ptsz",
                                                                                           Lib::kCuda);
}  // namespace

bool StreamIsCapturingSlow(void* stream, gpu::Path path, bool per_thread) {
  if (path == gpu::Path::kRuntime) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (per_thread && s == nullptr) s = cudaStreamPerThread;
    auto f = real_cudaStreamIsCapturing.get();
    return f && f(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
  }
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  auto f = per_thread ? real_cuStreamIsCapturing_ptsz.get() : real_cuStreamIsCapturing.get();
  return f && f(static_cast<CUstream>(stream), &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void UseRelaxedCaptureModeOnThisThread() {
  if (auto f = real_cudaThreadExchangeStreamCaptureMode.get()) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    f(&mode);
  }
}

}  // namespace xtimer

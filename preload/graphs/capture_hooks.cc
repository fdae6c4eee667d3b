// Hooks of the calls that begin and end stream capture: they keep g_active_captures, so that
// the launch path asks the runtime about capture only while one is in progress.
#include <cuda_runtime_api.h>

#include "preload/base/real_function.h"
#include "preload/graphs/capture_mode.h"

extern "C" {

static xtimer::RealFunction<decltype(&cudaStreamBeginCapture)> real_cudaStreamBeginCapture("cudaStreamBeginCapture",
                                                                                           xtimer::Lib::kCudart);
static xtimer::RealFunction<decltype(&cudaStreamBeginCapture)> real_cudaStreamBeginCapture_ptsz(
    "cudaStreamBeginCapture_ptsz", xtimer::Lib::kCudart);
static xtimer::RealFunction<decltype(&cudaStreamEndCapture)> real_cudaStreamEndCapture("cudaStreamEndCapture",
                                                                                       xtimer::Lib::kCudart);
static xtimer::RealFunction<decltype(&cudaStreamEndCapture)> real_cudaStreamEndCapture_ptsz("cudaStreamEndCapture_ptsz",
                                                                                            xtimer::Lib::kCudart);

static cudaError_t BeginCapture(decltype(&cudaStreamBeginCapture) f, cudaStream_t s, cudaStreamCaptureMode m) {
  if (f == nullptr) return cudaErrorInitializationError;
  xtimer::g_active_captures.fetch_add(1, std::memory_order_relaxed);
  cudaError_t r = f(s, m);
  if (r != cudaSuccess) xtimer::g_active_captures.fetch_sub(1, std::memory_order_relaxed);
  return r;
}

static cudaError_t EndCapture(decltype(&cudaStreamEndCapture) f, cudaStream_t s, cudaGraph_t* g) {
  if (f == nullptr) return cudaErrorInitializationError;
  cudaError_t r = f(s, g);
  // A failed end (invalidated capture) still ends the capture sequence.
  if (xtimer::g_active_captures.load(std::memory_order_relaxed) > 0)
    xtimer::g_active_captures.fetch_sub(1, std::memory_order_relaxed);
  return r;
}

XTIMER_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m) {
  return BeginCapture(real_cudaStreamBeginCapture.get(), s, m);
}
XTIMER_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode m) {
  return BeginCapture(real_cudaStreamBeginCapture_ptsz.get(), s, m);
}
XTIMER_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  return EndCapture(real_cudaStreamEndCapture.get(), s, g);
}
XTIMER_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) {
  return EndCapture(real_cudaStreamEndCapture_ptsz.get(), s, g);
}

}  // extern "C"

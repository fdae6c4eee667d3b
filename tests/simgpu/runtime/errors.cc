// cudaGetLastError & co. and the error strings.
#include "runtime/runtime.h"

namespace simgpu::rt {
namespace {
thread_local cudaError_t tls_last = cudaSuccess;
}

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) tls_last = e;
  return e;
}

}  // namespace simgpu::rt

namespace {

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched", "capture was not initiated in this stream"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* find(cudaError_t e) {
  for (const auto& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

}  // namespace

using namespace simgpu::rt;

SIMGPU_EXPORT cudaError_t cudaGetLastError() {
  cudaError_t e = tls_last;
  tls_last = cudaSuccess;
  return e;
}

SIMGPU_EXPORT cudaError_t cudaPeekAtLastError() { return tls_last; }

SIMGPU_EXPORT const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = find(e);
  return t ? t->text : "unrecognized error code";
}

SIMGPU_EXPORT const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = find(e);
  return t ? t->name : "cudaErrorUnknown";
}

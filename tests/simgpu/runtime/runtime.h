// Internal helpers of the simulated CUDA runtime (libcudart.so.13). Like the real one it
// holds no device state: every call goes to the driver through cuGetProcAddress.
#pragma once
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda_runtime_api.h>

#include "common/activity.h"
#include "common/driver_api.h"

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace simgpu::rt {

// Loads the driver and runs cuInit once; returns the sticky initialisation error.
cudaError_t init();
// The driver table (legacy or per-thread-default-stream flavour). Valid after init().
const DriverApi& drv(bool per_thread = false);
// init() plus a current context on this thread (the primary context of its device).
cudaError_t enter();
// Records e as the thread's last error (cudaErrorNotReady is not an error) and returns it.
cudaError_t record(cudaError_t e);
// Driver result -> runtime error (the numbering is shared), recorded.
inline cudaError_t from(CUresult r) { return record(static_cast<cudaError_t>(r)); }
// A launch's driver result as the runtime reports it (a bad configuration, a bad handle), recorded.
inline cudaError_t launch_error(CUresult r) {
  if (r == CUDA_ERROR_INVALID_VALUE) return record(cudaErrorInvalidConfiguration);
  if (r == CUDA_ERROR_INVALID_HANDLE) return record(cudaErrorInvalidResourceHandle);
  return from(r);
}
// Device ordinal the calling thread works on.
int current_device();

// Reports a runtime API call to the simulated libcupti's callbacks (through the driver, which
// gives it its correlation id): the entry now, the exit with done()'s status when it ends.
// Made after RT_ENTER() (the driver is loaded).
class ApiScope {
 public:
  ApiScope(uint32_t cbid, const char* function, const void* params, const void* kernel = nullptr);
  ~ApiScope();
  cudaError_t done(cudaError_t r) {
    status_ = r;
    return r;
  }
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;

 private:
  ApiCall call_;
  cudaError_t status_ = cudaSuccess;
  bool reported_ = false;
};

}  // namespace simgpu::rt

#define RT_ENTER()                                                               \
  do {                                                                           \
    if (cudaError_t e_ = ::simgpu::rt::enter()) return ::simgpu::rt::record(e_); \
  } while (0)

#define RT_DEFINE_PT(name, suffix, PARAMS, ...)                                     \
  SIMGPU_EXPORT cudaError_t name PARAMS { return name##_impl(__VA_ARGS__, false); } \
  SIMGPU_EXPORT cudaError_t name##suffix PARAMS { return name##_impl(__VA_ARGS__, true); }
#define RT_DEFINE_PTSZ(name, PARAMS, ...) RT_DEFINE_PT(name, _ptsz, PARAMS, __VA_ARGS__)
#define RT_DEFINE_PTDS(name, PARAMS, ...) RT_DEFINE_PT(name, _ptds, PARAMS, __VA_ARGS__)

// The CUDA runtime and NCCL, loaded with dlopen at run time: xtimer_netprobe links nothing of
// CUDA and runs (tcp backend) on machines without it. The function types come from the real
// headers (cuda_runtime_api.h, nccl.h), so a signature mismatch is a compile error. Timed
// measures calls between two events; xtimer_run's GPU checks use all of it too.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/net/net.h"

namespace xtimer::netprobe {

struct CudaRt {
  void* handle = nullptr;
  decltype(&::cudaGetErrorString) GetErrorString = nullptr;
  decltype(&::cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&::cudaSetDevice) SetDevice = nullptr;
  // (cudaMalloc, cudaMallocHost and cudaEventCreate have C++ template overloads: pick the C one.)
  decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMalloc)) Malloc = nullptr;
  decltype(&::cudaFree) Free = nullptr;
  decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMallocHost)) MallocHost = nullptr;
  decltype(&::cudaFreeHost) FreeHost = nullptr;
  decltype(&::cudaMemset) Memset = nullptr;
  decltype(&::cudaMemcpyAsync) MemcpyAsync = nullptr;
  decltype(&::cudaMemcpyPeerAsync) MemcpyPeerAsync = nullptr;
  decltype(&::cudaDeviceCanAccessPeer) DeviceCanAccessPeer = nullptr;
  decltype(&::cudaDeviceEnablePeerAccess) DeviceEnablePeerAccess = nullptr;
  decltype(&::cudaGetLastError) GetLastError = nullptr;
  decltype(&::cudaStreamCreate) StreamCreate = nullptr;
  decltype(&::cudaStreamDestroy) StreamDestroy = nullptr;
  decltype(static_cast<cudaError_t (*)(cudaEvent_t*)>(&::cudaEventCreate)) EventCreate = nullptr;
  decltype(&::cudaEventRecord) EventRecord = nullptr;
  decltype(&::cudaEventQuery) EventQuery = nullptr;
  decltype(&::cudaEventElapsedTime) EventElapsedTime = nullptr;
  decltype(&::cudaEventDestroy) EventDestroy = nullptr;
};

struct Nccl {
  void* handle = nullptr;
  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) CommInitRank = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
};

// libcudart.so.13 (else .so.12). On failure *error names the library and dlerror().
bool LoadCudaRt(CudaRt* api, std::string* error);
// libnccl.so.2.
bool LoadNccl(Nccl* api, std::string* error);

// Records `iters` calls of `op` between two events on `stream` and waits for them until the
// deadline. *seconds gets the time per call.
template <typename Op>
inline bool Timed(const CudaRt& cu, cudaStream_t stream, int iters, net::Deadline deadline, const char* what, Op&& op,
                  double* seconds, std::string* error) {
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t e = cu.EventCreate(&start);
  if (e == cudaSuccess) e = cu.EventCreate(&stop);
  if (e != cudaSuccess) {
    *error = std::string("cudaEventCreate: ") + cu.GetErrorString(e);
    return false;
  }
  bool ok = false;
  if ((e = cu.EventRecord(start, stream)) != cudaSuccess) {
    *error = std::string("cudaEventRecord: ") + cu.GetErrorString(e);
  } else {
    std::string op_error;
    int i = 0;
    for (; i < iters; ++i)
      if (!op(&op_error)) break;
    if (i < iters) {
      *error = std::string(what) + ": " + op_error;
    } else if ((e = cu.EventRecord(stop, stream)) != cudaSuccess) {
      *error = std::string("cudaEventRecord: ") + cu.GetErrorString(e);
    } else {
      while ((e = cu.EventQuery(stop)) == cudaErrorNotReady && !deadline.passed())
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      float ms = 0;
      if (e == cudaErrorNotReady) {
        *error = std::string(what) + " did not complete before the deadline";
      } else if (e != cudaSuccess) {
        *error = std::string(what) + ": " + cu.GetErrorString(e);
      } else if ((e = cu.EventElapsedTime(&ms, start, stop)) != cudaSuccess) {
        *error = std::string("cudaEventElapsedTime: ") + cu.GetErrorString(e);
      } else {
        *seconds = ms / 1000.0 / iters;
        ok = true;
      }
    }
  }
  if (ok || !deadline.passed()) {  // a stuck stream may hold the events; leave them then
    cu.EventDestroy(start);
    cu.EventDestroy(stop);
  }
  return ok;
}

}  // namespace xtimer::netprobe

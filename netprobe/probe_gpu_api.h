// The CUDA runtime and NCCL, loaded with dlopen at run time: xtimer_netprobe links nothing of
// CUDA and runs (tcp backend) on machines without it. The function types come from the real
// headers (cuda_runtime_api.h, nccl.h), so a signature mismatch is a compile error.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

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

}  // namespace xtimer::netprobe

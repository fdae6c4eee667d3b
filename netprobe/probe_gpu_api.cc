#include "netprobe/probe_gpu_api.h"

#include <dlfcn.h>

#include <span>

#include "common/cuda_libraries.h"

namespace xtimer::netprobe {
namespace {

void* Open(std::span<const char* const> names, std::string* error) {
  std::string tried;
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (e != nullptr ? e : n);
  }
  *error = "cannot load " + tried;
  return nullptr;
}

template <typename F>
bool Sym(void* h, const char* name, F* out, std::string* error) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (*out == nullptr) *error = std::string("symbol ") + name + " not found";
  return *out != nullptr;
}

}  // namespace

bool LoadCudaRt(CudaRt* a, std::string* error) {
  a->handle = Open(kCudartSonames, error);
  if (a->handle == nullptr) return false;
  void* h = a->handle;
  return Sym(h, "cudaGetErrorString", &a->GetErrorString, error) &&
         Sym(h, "cudaGetDeviceCount", &a->GetDeviceCount, error) && Sym(h, "cudaSetDevice", &a->SetDevice, error) &&
         Sym(h, "cudaMalloc", &a->Malloc, error) && Sym(h, "cudaFree", &a->Free, error) &&
         Sym(h, "cudaMallocHost", &a->MallocHost, error) && Sym(h, "cudaFreeHost", &a->FreeHost, error) &&
         Sym(h, "cudaMemset", &a->Memset, error) && Sym(h, "cudaMemcpyAsync", &a->MemcpyAsync, error) &&
         Sym(h, "cudaMemcpyPeerAsync", &a->MemcpyPeerAsync, error) &&
         Sym(h, "cudaDeviceCanAccessPeer", &a->DeviceCanAccessPeer, error) &&
         Sym(h, "cudaDeviceEnablePeerAccess", &a->DeviceEnablePeerAccess, error) &&
         Sym(h, "cudaGetLastError", &a->GetLastError, error) && Sym(h, "cudaStreamCreate", &a->StreamCreate, error) &&
         Sym(h, "cudaStreamDestroy", &a->StreamDestroy, error) && Sym(h, "cudaEventCreate", &a->EventCreate, error) &&
         Sym(h, "cudaEventRecord", &a->EventRecord, error) && Sym(h, "cudaEventQuery", &a->EventQuery, error) &&
         Sym(h, "cudaEventElapsedTime", &a->EventElapsedTime, error) &&
         Sym(h, "cudaEventDestroy", &a->EventDestroy, error);
}

bool LoadNccl(Nccl* a, std::string* error) {
  static const char* const kNames[] = {"libnccl.so.2"};
  a->handle = Open(kNames, error);
  if (a->handle == nullptr) return false;
  void* h = a->handle;
  return Sym(h, "ncclGetVersion", &a->GetVersion, error) && Sym(h, "ncclGetErrorString", &a->GetErrorString, error) &&
         Sym(h, "ncclGetUniqueId", &a->GetUniqueId, error) && Sym(h, "ncclCommInitRank", &a->CommInitRank, error) &&
         Sym(h, "ncclCommDestroy", &a->CommDestroy, error) && Sym(h, "ncclAllReduce", &a->AllReduce, error) &&
         Sym(h, "ncclSend", &a->Send, error) && Sym(h, "ncclRecv", &a->Recv, error) &&
         Sym(h, "ncclGroupStart", &a->GroupStart, error) && Sym(h, "ncclGroupEnd", &a->GroupEnd, error);
}

}  // namespace xtimer::netprobe

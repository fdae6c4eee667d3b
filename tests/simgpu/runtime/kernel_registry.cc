#include "runtime/kernel_registry.h"

#include <cupti_callbacks.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

using namespace simgpu;
using namespace simgpu::rt;

namespace {

struct Function {
  std::string device_name;
  std::atomic<CUfunction> handle{nullptr};  // the driver's named kernel, made on first use
};

// A __device__ variable: host memory stands in for device memory, as everywhere here.
struct Variable {
  size_t size = 0;
  void* storage = nullptr;
};

struct Registry {
  std::shared_mutex mu;
  std::unordered_map<const void*, Function*> functions;  // host stub -> kernel
  std::unordered_map<const void*, Variable> variables;   // host shadow -> storage
};
Registry& registry() {
  static auto* r = new Registry;  // never destroyed: atexit unregistration may come after
  return *r;
}

Function* find_function(const void* stub) {
  Registry& r = registry();
  std::shared_lock lk(r.mu);
  auto it = r.functions.find(stub);
  return it == r.functions.end() ? nullptr : it->second;
}

CUfunction handle_of(Function& fn) {
  CUfunction h = fn.handle.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  if (init() != cudaSuccess || drv().named_kernel == nullptr) return nullptr;
  h = static_cast<CUfunction>(drv().named_kernel(fn.device_name.c_str()));
  fn.handle.store(h, std::memory_order_release);
  return h;
}

const Variable* find_variable(const void* symbol) {
  Registry& r = registry();
  std::shared_lock lk(r.mu);
  auto it = r.variables.find(symbol);
  return it == r.variables.end() ? nullptr : &it->second;  // node-based map: stays valid
}

// The launch configurations pushed by `<<<...>>>` on this thread, popped by the host stub.
struct CallConfiguration {
  dim3 grid, block;
  size_t shmem;
  void* stream;
};
thread_local std::vector<CallConfiguration> tls_configurations;

CUstream S(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }

cudaError_t launch_library_kernel(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t s,
                                  bool pt) {
  RT_ENTER();
  // CUPTI lays this call's parameters out as cudaLaunchKernel's, with the kernel as its func.
  cudaLaunchKernel_v7000_params p{k, grid, block, args, shmem, s};
  ApiScope api(
      pt ? CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000 : CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
      pt ? "__cudaLaunchKernel_ptsz" : "__cudaLaunchKernel", &p, k);
  if (!k) return api.done(record(cudaErrorInvalidDeviceFunction));
  return api.done(launch_error(drv(pt).cuLaunchKernel(reinterpret_cast<CUfunction>(k), grid.x, grid.y, grid.z, block.x,
                                                      block.y, block.z, unsigned(shmem), S(s), args, nullptr)));
}

cudaError_t get_kernel(cudaKernel_t* out, const void* stub) {
  if (!out || !stub) return record(cudaErrorInvalidValue);
  RT_ENTER();
  *out = reinterpret_cast<cudaKernel_t>(launch_target(stub));
  return *out ? cudaSuccess : record(cudaErrorInvalidDeviceFunction);
}

}  // namespace

namespace simgpu::rt {

CUfunction launch_target(const void* f) {
  if (Function* fn = find_function(f)) return handle_of(*fn);
  return reinterpret_cast<CUfunction>(const_cast<void*>(f));
}

}  // namespace simgpu::rt

// ---- registration (called from the program's and its libraries' constructors) ----

SIMGPU_EXPORT void** __cudaRegisterFatBinary(void* fat_cubin) {
  // The handle only has to be unique and stable; the fat binary itself is never read.
  return new void*(fat_cubin);
}

SIMGPU_EXPORT void __cudaRegisterFatBinaryEnd(void**) {}

// Kept registered: code of an unloaded library is never launched again, and a host stub's
// address can only be reused by a library loaded later, which registers it anew.
SIMGPU_EXPORT void __cudaUnregisterFatBinary(void**) {}

SIMGPU_EXPORT void __cudaRegisterFunction(void**, const char* host_fun, char* device_fun, const char* device_name, int,
                                          uint3*, uint3*, dim3*, dim3*, int*) {
  const char* name = device_fun ? device_fun : device_name;
  if (!host_fun || !name) return;
  Registry& r = registry();
  std::unique_lock lk(r.mu);
  Function*& slot = r.functions[host_fun];
  if (slot == nullptr) slot = new Function;  // never freed: launches may hold it
  slot->device_name = name;
  slot->handle.store(nullptr, std::memory_order_relaxed);
}

SIMGPU_EXPORT void __cudaRegisterVar(void**, char* host_var, char*, const char*, int, size_t size, int, int) {
  if (!host_var) return;
  Registry& r = registry();
  std::unique_lock lk(r.mu);
  Variable& v = r.variables[host_var];
  if (v.storage == nullptr) {
    v.size = size;
    v.storage = std::calloc(1, std::max<size_t>(size, 1));  // never freed, like the registration
  }
}

SIMGPU_EXPORT void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
SIMGPU_EXPORT void __cudaRegisterTexture(void**, const void*, const void**, const char*, int, int, int) {}
SIMGPU_EXPORT void __cudaRegisterSurface(void**, const void*, const void**, const char*, int, int) {}
SIMGPU_EXPORT char __cudaInitModule(void**) { return 1; }

// ---- launches ----

SIMGPU_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, CUstream_st* stream) {
  tls_configurations.push_back(CallConfiguration{grid, block, shmem, stream});
  return 0;
}

SIMGPU_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shmem, void* stream) {
  if (tls_configurations.empty()) return record(cudaErrorMissingConfiguration);
  const CallConfiguration c = tls_configurations.back();
  tls_configurations.pop_back();
  if (grid) *grid = c.grid;
  if (block) *block = c.block;
  if (shmem) *shmem = c.shmem;
  if (stream) *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* out, const void* stub) { return get_kernel(out, stub); }
SIMGPU_EXPORT cudaError_t cudaGetKernel(cudaKernel_t* out, const void* stub) { return get_kernel(out, stub); }

SIMGPU_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t shmem,
                                             cudaStream_t s) {
  return launch_library_kernel(k, grid, block, args, shmem, s, false);
}

SIMGPU_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t shmem,
                                                  cudaStream_t s) {
  return launch_library_kernel(k, grid, block, args, shmem, s, true);
}

SIMGPU_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t k, cudaFuncAttribute, int, int) {
  return k ? cudaSuccess : record(cudaErrorInvalidDeviceFunction);
}

// ---- occupancy (the driver's answer: 2048 threads per SM, at most 32 blocks) ----

SIMGPU_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* f,
                                                                                 int block_size, size_t shmem,
                                                                                 unsigned flags) {
  if (!blocks || !f) return record(cudaErrorInvalidValue);
  RT_ENTER();
  return from(
      drv().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, launch_target(f), block_size, shmem, flags));
}

SIMGPU_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* f, int block_size,
                                                                        size_t shmem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, shmem, 0);
}

// ---- device variables ----

SIMGPU_EXPORT cudaError_t cudaGetSymbolAddress(void** out, const void* symbol) {
  if (!out) return record(cudaErrorInvalidValue);
  const Variable* v = find_variable(symbol);
  if (!v) return record(cudaErrorInvalidSymbol);
  *out = v->storage;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaGetSymbolSize(size_t* out, const void* symbol) {
  if (!out) return record(cudaErrorInvalidValue);
  const Variable* v = find_variable(symbol);
  if (!v) return record(cudaErrorInvalidSymbol);
  *out = v->size;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                             cudaMemcpyKind) {
  const Variable* v = find_variable(symbol);
  if (!v) return record(cudaErrorInvalidSymbol);
  if (!src || offset > v->size || count > v->size - offset) return record(cudaErrorInvalidValue);
  RT_ENTER();
  if (CUresult r = drv().cuCtxSynchronize()) return from(r);
  std::memcpy(static_cast<char*>(v->storage) + offset, src, count);
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                               cudaMemcpyKind) {
  const Variable* v = find_variable(symbol);
  if (!v) return record(cudaErrorInvalidSymbol);
  if (!dst || offset > v->size || count > v->size - offset) return record(cudaErrorInvalidValue);
  RT_ENTER();
  if (CUresult r = drv().cuCtxSynchronize()) return from(r);
  std::memcpy(dst, static_cast<const char*>(v->storage) + offset, count);
  return cudaSuccess;
}

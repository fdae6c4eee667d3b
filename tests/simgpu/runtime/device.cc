// Runtime initialisation, devices and contexts.
#include <cstring>
#include <mutex>

#include <cupti_callbacks.h>

#include "runtime/runtime.h"

namespace simgpu::rt {
namespace {

struct RtState {
  std::once_flag once;
  cudaError_t err = cudaSuccess;
  const DriverApi* legacy = nullptr;
  const DriverApi* ptds = nullptr;
  int count = 0;
  std::mutex m;
  CUcontext primary[16] = {};
};

RtState& st() {
  static RtState* s = new RtState;  // leaked: used by callbacks during exit()
  return *s;
}

thread_local int tls_device = 0;

CUcontext primary(int dev) {
  auto& s = st();
  std::lock_guard lk(s.m);
  if (!s.primary[dev] && s.legacy->cuDevicePrimaryCtxRetain(&s.primary[dev], dev) != CUDA_SUCCESS)
    s.primary[dev] = nullptr;
  return s.primary[dev];
}

}  // namespace

cudaError_t init() {
  auto& s = st();
  std::call_once(s.once, [&] {
    s.legacy = driver_api(false);
    s.ptds = driver_api(true);
    if (!s.legacy || !s.ptds) {
      s.err = cudaErrorInsufficientDriver;
      return;
    }
    CUresult r = s.legacy->cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
      s.err = cudaErrorNoDevice;
    } else if (r != CUDA_SUCCESS) {
      s.err = cudaErrorInitializationError;
    } else if (s.legacy->cuDeviceGetCount(&s.count) != CUDA_SUCCESS || s.count == 0) {
      s.err = cudaErrorNoDevice;
    }
  });
  return s.err;
}

const DriverApi& drv(bool per_thread) { return per_thread ? *st().ptds : *st().legacy; }

ApiScope::ApiScope(uint32_t cbid, const char* function, const void* params, const void* kernel) {
  if (drv().api_enter == nullptr) return;
  call_.domain = CUPTI_CB_DOMAIN_RUNTIME_API;
  call_.cbid = cbid;
  call_.function = function;
  call_.params = params;
  call_.kernel = kernel;
  drv().api_enter(&call_);
  reported_ = true;
}

ApiScope::~ApiScope() {
  if (!reported_) return;
  call_.status = &status_;
  drv().api_exit(&call_);
}

cudaError_t enter() {
  if (cudaError_t e = init()) return e;
  CUcontext cur = nullptr;
  st().legacy->cuCtxGetCurrent(&cur);
  if (!cur) {
    CUcontext c = primary(tls_device);
    if (!c) return cudaErrorInitializationError;
    st().legacy->cuCtxSetCurrent(c);
  }
  return cudaSuccess;
}

int current_device() {
  CUdevice d;
  if (st().legacy && st().legacy->cuCtxGetDevice(&d) == CUDA_SUCCESS) return d;
  return tls_device;
}

}  // namespace simgpu::rt

using namespace simgpu;
using namespace simgpu::rt;

SIMGPU_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return record(cudaErrorInvalidValue);
  if (cudaError_t e = init()) {
    *count = 0;
    return record(e);
  }
  *count = st().count;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaSetDevice(int dev) {
  if (cudaError_t e = init()) return record(e);
  if (dev < 0 || dev >= st().count) return record(cudaErrorInvalidDevice);
  CUcontext c = primary(dev);
  if (!c) return record(cudaErrorInitializationError);
  tls_device = dev;
  return from(drv().cuCtxSetCurrent(c));
}

SIMGPU_EXPORT cudaError_t cudaInitDevice(int dev, unsigned int, unsigned int) {
  if (cudaError_t e = init()) return record(e);
  if (dev < 0 || dev >= st().count) return record(cudaErrorInvalidDevice);
  return primary(dev) ? cudaSuccess : record(cudaErrorInitializationError);
}

SIMGPU_EXPORT cudaError_t cudaGetDevice(int* dev) {
  if (!dev) return record(cudaErrorInvalidValue);
  if (cudaError_t e = init()) return record(e);
  *dev = current_device();
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  RT_ENTER();
  return from(drv().cuDevicePrimaryCtxSetFlags_v2(current_device(), flags & 0xff));
}

SIMGPU_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return record(cudaErrorInvalidValue);
  RT_ENTER();
  int active = 0;
  return from(drv().cuDevicePrimaryCtxGetState(current_device(), flags, &active));
}

SIMGPU_EXPORT cudaError_t cudaDeviceSynchronize() {
  RT_ENTER();
  return from(drv().cuCtxSynchronize());
}

SIMGPU_EXPORT cudaError_t cudaDeviceReset() {
  RT_ENTER();
  return from(drv().cuDevicePrimaryCtxReset_v2(current_device()));
}

SIMGPU_EXPORT cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return record(cudaErrorInvalidValue);
  // Works without a GPU, like the real one (0 when there is no driver at all).
  const DriverApi* d = driver_api(false);
  if (!d) {
    *v = 0;
    return cudaSuccess;
  }
  return from(d->cuDriverGetVersion(v));
}

SIMGPU_EXPORT cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return record(cudaErrorInvalidValue);
  *v = kCudaVersion;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev) {
  if (!value) return record(cudaErrorInvalidValue);
  if (cudaError_t e = init()) return record(e);
  if (dev < 0 || dev >= st().count) return record(cudaErrorInvalidDevice);
  return from(drv().cuDeviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), dev));
}

SIMGPU_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
  if (!p) return record(cudaErrorInvalidValue);
  if (cudaError_t e = init()) return record(e);
  if (dev < 0 || dev >= st().count) return record(cudaErrorInvalidDevice);
  const DriverApi& d = drv();
  memset(p, 0, sizeof *p);
  d.cuDeviceGetName(p->name, sizeof p->name, dev);
  CUuuid uuid;
  d.cuDeviceGetUuid_v2(&uuid, dev);
  memcpy(&p->uuid, &uuid, sizeof uuid);
  d.cuDeviceTotalMem_v2(&p->totalGlobalMem, dev);
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    d.cuDeviceGetAttribute(&v, a, dev);
    return v;
  };
  p->sharedMemPerBlock = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  p->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  p->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p->memPitch = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH));
  p->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  p->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  p->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  p->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  p->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  p->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  p->totalConstMem = size_t(attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY));
  p->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p->textureAlignment = size_t(attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT));
  p->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  p->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  p->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  p->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  p->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  p->pciDeviceID = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  p->pciDomainID = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  p->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  p->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  p->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  p->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  p->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  p->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED);
  p->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED);
  p->sharedMemPerMultiprocessor = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  p->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  p->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  p->isMultiGpuBoard = attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
  p->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  p->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  p->sharedMemPerBlockOptin = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  p->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  p->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  p->hostRegisterSupported = 1;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  RT_ENTER();
  return from(drv().cuCtxGetStreamPriorityRange(least, greatest));
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int dev) {
  if (cudaError_t e = init()) return record(e);
  return from(drv().cuDeviceGetPCIBusId(id, len, dev));
}

SIMGPU_EXPORT cudaError_t cudaDeviceCanAccessPeer(int* can, int dev, int peer) {
  if (!can) return record(cudaErrorInvalidValue);
  if (cudaError_t e = init()) return record(e);
  if (dev < 0 || dev >= st().count || peer < 0 || peer >= st().count) return record(cudaErrorInvalidDevice);
  *can = dev != peer;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  RT_ENTER();
  return (peer >= 0 && peer < st().count) ? cudaSuccess : record(cudaErrorInvalidDevice);
}

SIMGPU_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  RT_ENTER();
  return (peer >= 0 && peer < st().count) ? cudaSuccess : record(cudaErrorInvalidDevice);
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (!value) return record(cudaErrorInvalidValue);
  RT_ENTER();
  *value = limit == cudaLimitStackSize ? 1024 : 0;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) {
  RT_ENTER();
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) {
  RT_ENTER();
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* c) {
  if (!c) return record(cudaErrorInvalidValue);
  RT_ENTER();
  *c = cudaFuncCachePreferNone;
  return cudaSuccess;
}

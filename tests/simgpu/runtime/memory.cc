// Memory API of the runtime, on top of the driver's allocator and stream-ordered copies.
#include "runtime/runtime.h"

using namespace simgpu;
using namespace simgpu::rt;

namespace {

CUstream S(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
CUdeviceptr D(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

cudaError_t mem_error(CUresult r) {
  return from(r == CUDA_ERROR_OUT_OF_MEMORY ? CUresult(cudaErrorMemoryAllocation) : r);
}

cudaError_t cudaMemcpy_impl(void* dst, const void* src, size_t n, cudaMemcpyKind, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuMemcpy(D(dst), D(src), n));
}
cudaError_t cudaMemcpyAsync_impl(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuMemcpyAsync(D(dst), D(src), n, S(s)));
}
cudaError_t cudaMemset_impl(void* p, int v, size_t n, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuMemsetD8_v2(D(p), static_cast<unsigned char>(v), n));
}
cudaError_t cudaMemsetAsync_impl(void* p, int v, size_t n, cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuMemsetD8Async(D(p), static_cast<unsigned char>(v), n, S(s)));
}
cudaError_t cudaMallocAsync_impl(void** p, size_t n, cudaStream_t s, bool pt) {
  if (!p) return record(cudaErrorInvalidValue);
  RT_ENTER();
  if (n == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  return mem_error(drv(pt).cuMemAllocAsync(reinterpret_cast<CUdeviceptr*>(p), n, S(s)));
}
cudaError_t cudaFreeAsync_impl(void* p, cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuMemFreeAsync(D(p), S(s)));
}

}  // namespace

SIMGPU_EXPORT cudaError_t cudaMalloc(void** p, size_t n) {
  if (!p) return record(cudaErrorInvalidValue);
  RT_ENTER();
  if (n == 0) {  // legal, yields NULL
    *p = nullptr;
    return cudaSuccess;
  }
  return mem_error(drv().cuMemAlloc_v2(reinterpret_cast<CUdeviceptr*>(p), n));
}

SIMGPU_EXPORT cudaError_t cudaMallocManaged(void** p, size_t n, unsigned int flags) {
  if (!p) return record(cudaErrorInvalidValue);
  RT_ENTER();
  if (n == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  return mem_error(drv().cuMemAllocManaged(reinterpret_cast<CUdeviceptr*>(p), n, flags));
}

SIMGPU_EXPORT cudaError_t cudaFree(void* p) {
  RT_ENTER();
  return from(drv().cuMemFree_v2(D(p)));
}

SIMGPU_EXPORT cudaError_t cudaMallocHost(void** p, size_t n) {
  if (!p) return record(cudaErrorInvalidValue);
  RT_ENTER();
  return mem_error(drv().cuMemAllocHost_v2(p, n));
}

SIMGPU_EXPORT cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int flags) {
  if (!p) return record(cudaErrorInvalidValue);
  RT_ENTER();
  return mem_error(drv().cuMemHostAlloc(p, n, flags));
}

SIMGPU_EXPORT cudaError_t cudaFreeHost(void* p) {
  RT_ENTER();
  return from(drv().cuMemFreeHost(p));
}

SIMGPU_EXPORT cudaError_t cudaHostRegister(void* p, size_t n, unsigned int flags) {
  RT_ENTER();
  return from(drv().cuMemHostRegister_v2(p, n, flags));
}

SIMGPU_EXPORT cudaError_t cudaHostUnregister(void* p) {
  RT_ENTER();
  return from(drv().cuMemHostUnregister(p));
}

SIMGPU_EXPORT cudaError_t cudaHostGetFlags(unsigned int* flags, void* p) {
  RT_ENTER();
  return from(drv().cuMemHostGetFlags(flags, p));
}

SIMGPU_EXPORT cudaError_t cudaHostGetDevicePointer(void** d, void* p, unsigned int flags) {
  if (!d || flags) return record(cudaErrorInvalidValue);
  RT_ENTER();
  unsigned type = 0;
  if (drv().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, D(p)) != CUDA_SUCCESS)
    return record(cudaErrorInvalidValue);
  *d = p;  // host memory is device-visible at the same address
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  RT_ENTER();
  return from(drv().cuMemGetInfo_v2(free_bytes, total));
}

SIMGPU_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  if (!a) return record(cudaErrorInvalidValue);
  RT_ENTER();
  *a = cudaPointerAttributes{};
  unsigned type = 0;
  if (drv().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, D(p)) != CUDA_SUCCESS) {
    a->type = cudaMemoryTypeUnregistered;  // CUDA >= 11: plain host memory is not an error
    a->device = -2;
    a->hostPointer = const_cast<void*>(p);
    return cudaSuccess;
  }
  unsigned managed = 0;
  drv().cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, D(p));
  int ordinal = 0;
  drv().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, D(p));
  a->type = managed ? cudaMemoryTypeManaged : (type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost : cudaMemoryTypeDevice);
  a->device = ordinal;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = (a->type == cudaMemoryTypeDevice) ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t n) {
  RT_ENTER();
  return from(drv().cuMemcpy(D(dst), D(src), n));
}

SIMGPU_EXPORT cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t n, cudaStream_t s) {
  RT_ENTER();
  return from(drv().cuMemcpyAsync(D(dst), D(src), n, S(s)));
}

RT_DEFINE_PTDS(cudaMemcpy, (void* dst, const void* src, size_t n, cudaMemcpyKind kind), dst, src, n, kind)
RT_DEFINE_PTSZ(cudaMemcpyAsync, (void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s), dst, src,
               n, kind, s)
RT_DEFINE_PTDS(cudaMemset, (void* p, int v, size_t n), p, v, n)
RT_DEFINE_PTSZ(cudaMemsetAsync, (void* p, int v, size_t n, cudaStream_t s), p, v, n, s)
RT_DEFINE_PTSZ(cudaMallocAsync, (void** p, size_t n, cudaStream_t s), p, n, s)
RT_DEFINE_PTSZ(cudaFreeAsync, (void* p, cudaStream_t s), p, s)

// Memory: "device" memory is plain host memory with an allocation registry, so pointer
// queries, cudaMemGetInfo and out-of-memory behave; copies and memsets run on streams.
#include <cstdlib>
#include <cstring>
#include <map>

#include "driver/driver.h"

namespace simgpu::drv {
namespace {

enum class MemKind { Device, Managed, HostAlloc, HostRegistered };

struct Alloc {
  size_t size;
  MemKind kind;
  Device* dev;
  unsigned flags;
};

std::mutex g_mem_mu;
auto* g_allocs = new std::map<uintptr_t, Alloc>;  // leaked: used by workers during exit()

// The allocation containing p, or nullptr. Caller holds g_mem_mu.
std::pair<const uintptr_t, Alloc>* find_containing(uintptr_t p) {
  auto it = g_allocs->upper_bound(p);
  if (it == g_allocs->begin()) return nullptr;
  --it;
  return (p >= it->first && p < it->first + (it->second.size ? it->second.size : 1)) ? &*it : nullptr;
}

bool overlaps(uintptr_t p, size_t n) {
  auto it = g_allocs->lower_bound(p);
  if (it != g_allocs->end() && it->first < p + n) return true;
  if (it == g_allocs->begin()) return false;
  --it;
  return it->first + it->second.size > p;
}

size_t round256(size_t n) { return (n + 255) & ~size_t(255); }

}  // namespace

// Where each end of a copy lives, from one look at the allocations.
struct CopyEnds {
  uint8_t kind = 9;                                 // CUpti_ActivityMemcpyKind: HTOD 1, DTOH 2, DTOD 8, HTOH 9
  bool dst_pageable = false, src_pageable = false;  // host memory neither allocated nor registered here
};

static CopyEnds copy_ends(const void* dst, const void* src) {
  std::lock_guard lk(g_mem_mu);
  auto* d = find_containing(reinterpret_cast<uintptr_t>(dst));
  auto* s = find_containing(reinterpret_cast<uintptr_t>(src));
  auto on_device = [](auto* a) {
    return a && (a->second.kind == MemKind::Device || a->second.kind == MemKind::Managed);
  };
  const bool dd = on_device(d), sd = on_device(s);
  return CopyEnds{uint8_t(dd ? (sd ? 8 : 1) : (sd ? 2 : 9)), d == nullptr, s == nullptr};
}

uint8_t copy_kind(const void* dst, const void* src) { return copy_ends(dst, src).kind; }

namespace {

CUresult alloc_device(CUdeviceptr* dptr, size_t bytes, MemKind kind) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  Context* c = current_context();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Device* d = c->dev;
  uint64_t used = d->used.load();
  do {
    if (used + round256(bytes) > d->total_mem) return CUDA_ERROR_OUT_OF_MEMORY;
  } while (!d->used.compare_exchange_weak(used, used + round256(bytes)));
  void* p = aligned_alloc(256, round256(bytes));
  if (!p) {
    d->used.fetch_sub(round256(bytes));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  {
    std::lock_guard lk(g_mem_mu);
    (*g_allocs)[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, kind, d, 0};
  }
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult alloc_host(void** pp, size_t bytes, unsigned flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = aligned_alloc(4096, (bytes + 4095) & ~size_t(4095));
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  {
    std::lock_guard lk(g_mem_mu);
    (*g_allocs)[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, MemKind::HostAlloc, nullptr, flags};
  }
  *pp = p;
  return CUDA_SUCCESS;
}

// Freeing synchronises the context, as cudaFree/cudaFreeHost do on hardware; it also
// keeps queued copies from touching freed memory.
void sync_current() {
  if (Context* c = current_context()) c->synchronize();
}

Stream* default_stream(bool ptds, CUresult* err) { return resolve_stream(nullptr, ptds, err); }

CUresult copy_sync(void* dst, const void* src, size_t n, bool ptds) {
  if (CUresult st = init_status()) return st;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  Stream* s = default_stream(ptds, &err);
  if (!s) return err;
  Op op;
  op.kind = OpKind::Memcpy;
  op.a = dst;
  op.b = const_cast<void*>(src);
  op.n = n;
  op.copy_kind = copy_kind(dst, src);
  return enqueue_and_wait(s, std::move(op));
}

CUresult copy_async(void* dst, const void* src, size_t n, CUstream h, bool ptds) {
  if (CUresult st = init_status()) return st;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  Op op;
  op.kind = OpKind::Memcpy;
  op.a = dst;
  op.b = const_cast<void*>(src);
  op.n = n;
  const CopyEnds ends = copy_ends(dst, src);
  op.copy_kind = ends.kind;
  // Pageable host memory (neither allocated nor registered here), as CUDA treats it: a copy into
  // it returns once it is done; a copy from it returns once its bytes are staged, so the caller
  // may free or reuse the buffer at once (torch does: a DataLoader batch's `.to(device,
  // non_blocking=True)`, then the batch is dropped).
  if (ends.dst_pageable) {  // still an async copy to CUPTI (its record's flag), only waited for
    {
      std::lock_guard lk(s->m);
      if (s->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // it could not wait
    }
    s->wait_for(enqueue(s, std::move(op)));
    return CUDA_SUCCESS;
  }
  if (ends.src_pageable) {
    std::shared_ptr<char[]> staged(new char[n]);
    std::memcpy(staged.get(), src, n);
    op.b = staged.get();
    op.ref = std::move(staged);
  }
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

Op memset_op(CUdeviceptr d, uint32_t v, unsigned elem, size_t n) {
  Op op;
  op.kind = OpKind::Memset;
  op.a = reinterpret_cast<void*>(d);
  op.n = n;
  op.m = (uint64_t(elem) << 32) | v;
  return op;
}

CUresult memset_sync(CUdeviceptr d, uint32_t v, unsigned elem, size_t n, bool ptds) {
  if (CUresult st = init_status()) return st;
  if (n == 0) return CUDA_SUCCESS;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  Stream* s = default_stream(ptds, &err);
  if (!s) return err;
  return enqueue_and_wait(s, memset_op(d, v, elem, n));
}

CUresult memset_async(CUdeviceptr d, uint32_t v, unsigned elem, size_t n, CUstream h, bool ptds) {
  if (CUresult st = init_status()) return st;
  if (n == 0) return CUDA_SUCCESS;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  enqueue(s, memset_op(d, v, elem, n));
  return CUDA_SUCCESS;
}

void* P(CUdeviceptr d) { return reinterpret_cast<void*>(d); }

CUresult cuMemcpy_impl(CUdeviceptr dst, CUdeviceptr src, size_t n, bool ptds) {
  return copy_sync(P(dst), P(src), n, ptds);
}
CUresult cuMemcpyHtoD_v2_impl(CUdeviceptr dst, const void* src, size_t n, bool ptds) {
  return copy_sync(P(dst), src, n, ptds);
}
CUresult cuMemcpyDtoH_v2_impl(void* dst, CUdeviceptr src, size_t n, bool ptds) {
  return copy_sync(dst, P(src), n, ptds);
}
CUresult cuMemcpyDtoD_v2_impl(CUdeviceptr dst, CUdeviceptr src, size_t n, bool ptds) {
  return copy_sync(P(dst), P(src), n, ptds);
}
CUresult cuMemcpyPeer_impl(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n, bool ptds) {
  return copy_sync(P(dst), P(src), n, ptds);
}
CUresult cuMemcpyAsync_impl(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds) {
  return copy_async(P(dst), P(src), n, h, ptds);
}
CUresult cuMemcpyHtoDAsync_v2_impl(CUdeviceptr dst, const void* src, size_t n, CUstream h, bool ptds) {
  return copy_async(P(dst), src, n, h, ptds);
}
CUresult cuMemcpyDtoHAsync_v2_impl(void* dst, CUdeviceptr src, size_t n, CUstream h, bool ptds) {
  return copy_async(dst, P(src), n, h, ptds);
}
CUresult cuMemcpyDtoDAsync_v2_impl(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool ptds) {
  return copy_async(P(dst), P(src), n, h, ptds);
}
CUresult cuMemcpyPeerAsync_impl(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n, CUstream h,
                                bool ptds) {
  return copy_async(P(dst), P(src), n, h, ptds);
}
CUresult cuMemsetD8_v2_impl(CUdeviceptr d, unsigned char v, size_t n, bool ptds) {
  return memset_sync(d, v, 1, n, ptds);
}
CUresult cuMemsetD16_v2_impl(CUdeviceptr d, unsigned short v, size_t n, bool ptds) {
  return memset_sync(d, v, 2, n, ptds);
}
CUresult cuMemsetD32_v2_impl(CUdeviceptr d, unsigned int v, size_t n, bool ptds) {
  return memset_sync(d, v, 4, n, ptds);
}
CUresult cuMemsetD8Async_impl(CUdeviceptr d, unsigned char v, size_t n, CUstream h, bool ptds) {
  return memset_async(d, v, 1, n, h, ptds);
}
CUresult cuMemsetD16Async_impl(CUdeviceptr d, unsigned short v, size_t n, CUstream h, bool ptds) {
  return memset_async(d, v, 2, n, h, ptds);
}
CUresult cuMemsetD32Async_impl(CUdeviceptr d, unsigned int v, size_t n, CUstream h, bool ptds) {
  return memset_async(d, v, 4, n, h, ptds);
}

CUresult cuMemAllocAsync_impl(CUdeviceptr* dptr, size_t bytes, CUstream h, bool ptds) {
  CUresult err;
  if (CUresult st = init_status()) return st;
  if (!resolve_stream(h, ptds, &err)) return err;
  return alloc_device(dptr, bytes, MemKind::Device);
}

// Stream-ordered free: the memory goes when the stream reaches this point.
CUresult cuMemFreeAsync_impl(CUdeviceptr d, CUstream h, bool ptds) {
  if (CUresult st = init_status()) return st;
  if (!d) return CUDA_SUCCESS;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs->find(d);
    if (it == g_allocs->end() || it->second.kind == MemKind::HostAlloc || it->second.kind == MemKind::HostRegistered)
      return CUDA_ERROR_INVALID_VALUE;
  }
  Op op;
  op.kind = OpKind::Free;
  op.a = P(d);
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace

void free_device_memory(void* p) {
  Alloc a;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs->find(reinterpret_cast<uintptr_t>(p));
    if (it == g_allocs->end()) return;
    a = it->second;
    g_allocs->erase(it);
  }
  if (a.dev) a.dev->used.fetch_sub(round256(a.size));
  free(p);
}

}  // namespace simgpu::drv

using namespace simgpu::drv;

SIMGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return alloc_device(dptr, bytes, MemKind::Device);
}

SIMGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int) {
  return alloc_device(dptr, bytes, MemKind::Managed);
}

SIMGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int) {
  if (!pitch) return CUDA_ERROR_INVALID_VALUE;
  *pitch = round256(width);
  return alloc_device(dptr, *pitch * height, MemKind::Device);
}

SIMGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr d) {
  if (CUresult st = init_status()) return st;
  if (!d) return CUDA_SUCCESS;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs->find(d);
    if (it == g_allocs->end() || it->second.kind == MemKind::HostAlloc || it->second.kind == MemKind::HostRegistered)
      return CUDA_ERROR_INVALID_VALUE;
  }
  sync_current();
  free_device_memory(P(d));
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return alloc_host(pp, bytes, 0); }

SIMGPU_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  return alloc_host(pp, bytes, flags);
}

SIMGPU_EXPORT CUresult cuMemFreeHost(void* p) {
  if (CUresult st = init_status()) return st;
  if (!p) return CUDA_SUCCESS;
  {
    std::lock_guard lk(g_mem_mu);
    auto it = g_allocs->find(reinterpret_cast<uintptr_t>(p));
    if (it == g_allocs->end() || it->second.kind != MemKind::HostAlloc) return CUDA_ERROR_INVALID_VALUE;
  }
  sync_current();
  {
    std::lock_guard lk(g_mem_mu);
    g_allocs->erase(reinterpret_cast<uintptr_t>(p));
  }
  free(p);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  if (CUresult st = init_status()) return st;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard lk(g_mem_mu);
  if (overlaps(reinterpret_cast<uintptr_t>(p), bytes)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  (*g_allocs)[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, MemKind::HostRegistered, nullptr, flags};
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuMemHostRegister(void* p, size_t bytes, unsigned int flags) {
  return cuMemHostRegister_v2(p, bytes, flags);
}

SIMGPU_EXPORT CUresult cuMemHostUnregister(void* p) {
  if (CUresult st = init_status()) return st;
  std::lock_guard lk(g_mem_mu);
  auto it = g_allocs->find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs->end() || it->second.kind != MemKind::HostRegistered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_allocs->erase(it);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  std::lock_guard lk(g_mem_mu);
  auto* a = find_containing(reinterpret_cast<uintptr_t>(p));
  if (!a || (a->second.kind != MemKind::HostAlloc && a->second.kind != MemKind::HostRegistered))
    return CUDA_ERROR_INVALID_VALUE;
  *flags = a->second.flags;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned int flags) {
  if (!d || flags) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  std::lock_guard lk(g_mem_mu);
  if (!find_containing(reinterpret_cast<uintptr_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (CUresult st = init_status()) return st;
  Context* c = current_context();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t used = c->dev->used.load();
  if (free_bytes) *free_bytes = c->dev->total_mem > used ? c->dev->total_mem - used : 0;
  if (total) *total = c->dev->total_mem;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr d) {
  if (CUresult st = init_status()) return st;
  std::lock_guard lk(g_mem_mu);
  auto* a = find_containing(d);
  if (!a) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = a->first;
  if (size) *size = a->second.size;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  std::lock_guard lk(g_mem_mu);
  auto* a = find_containing(ptr);
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  const bool host = a->second.kind == MemKind::HostAlloc || a->second.kind == MemKind::HostRegistered;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      *static_cast<void**>(data) = (host || a->second.kind == MemKind::Managed) ? P(ptr) : nullptr;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = a->second.dev ? a->second.dev->ordinal : 0;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = a->second.kind == MemKind::Managed; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = a->first; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = a->second.size; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = a->first; break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = a->second.dev ? reinterpret_cast<CUcontext>(a->second.dev->primary) : nullptr;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

SIMGPU_DEFINE_PTDS(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), dst, src, n)
SIMGPU_DEFINE_PTDS(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t n), dst, src, n)
SIMGPU_DEFINE_PTDS(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), dst, src, n)
SIMGPU_DEFINE_PTDS(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), dst, src, n)
SIMGPU_DEFINE_PTDS(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), dst, dc, src,
                   sc, n)
SIMGPU_DEFINE_PTSZ(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h), dst, src, n, h)
SIMGPU_DEFINE_PTSZ(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t n, CUstream h), dst, src, n, h)
SIMGPU_DEFINE_PTSZ(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream h), dst, src, n, h)
SIMGPU_DEFINE_PTSZ(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h), dst, src, n, h)
SIMGPU_DEFINE_PTSZ(cuMemcpyPeerAsync,
                   (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream h), dst, dc, src,
                   sc, n, h)
SIMGPU_DEFINE_PTDS(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), d, v, n)
SIMGPU_DEFINE_PTDS(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), d, v, n)
SIMGPU_DEFINE_PTDS(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), d, v, n)
SIMGPU_DEFINE_PTSZ(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream h), d, v, n, h)
SIMGPU_DEFINE_PTSZ(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream h), d, v, n, h)
SIMGPU_DEFINE_PTSZ(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream h), d, v, n, h)
SIMGPU_DEFINE_PTSZ(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytes, CUstream h), dptr, bytes, h)
SIMGPU_DEFINE_PTSZ(cuMemFreeAsync, (CUdeviceptr d, CUstream h), d, h)

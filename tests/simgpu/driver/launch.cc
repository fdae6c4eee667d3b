// Kernel launches. A CUfunction IS a host function `void kernel(void** args)`; it runs on
// the stream's worker with the kernelParams array. Because the real driver copies the
// parameters at launch, so do we when the kernel says how big they are (simgpu/kernel.h).
#include <dlfcn.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "driver/api_params.h"
#include "driver/driver.h"
#include "driver/named_kernel.h"
// After driver.h, which selects the API version cuda.h declares.
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>

namespace simgpu::drv {
namespace {

struct Layout {
  bool known = false;
  std::vector<size_t> sizes;
};

std::shared_mutex g_layout_mu;
std::unordered_map<void*, Layout>* g_layouts = new std::unordered_map<void*, Layout>;

Layout lookup_layout(void* fn) {
  Layout l;
  Dl_info info{};
  if (!dladdr(fn, &info) || !info.dli_sname || info.dli_saddr != fn) return l;
  const std::string name = std::string("simgpu_params_") + info.dli_sname;
  void* sym = nullptr;
  if (info.dli_fname) {
    if (void* h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
      sym = dlsym(h, name.c_str());
      dlclose(h);
    }
  }
  if (!sym) sym = dlsym(RTLD_DEFAULT, name.c_str());
  if (!sym) return l;
  l.known = true;
  for (auto* p = static_cast<const size_t*>(sym); *p && l.sizes.size() < 256; ++p) l.sizes.push_back(*p);
  return l;
}

const Layout& layout_for(void* fn) {
  {
    std::shared_lock lk(g_layout_mu);
    auto it = g_layouts->find(fn);
    if (it != g_layouts->end()) return it->second;
  }
  Layout l = lookup_layout(fn);
  std::unique_lock lk(g_layout_mu);
  return g_layouts->emplace(fn, std::move(l)).first->second;  // node-based: reference stays valid
}

size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

}  // namespace

std::shared_ptr<void> copy_params(void* fn, void** params, void** extra, void*** out) {
  *out = params;
  if (params) {
    const Layout& l = layout_for(fn);
    if (!l.known) return nullptr;  // the caller keeps its parameters alive until the kernel ran
    const size_t n = l.sizes.size();
    size_t total = align16(n * sizeof(void*));
    for (size_t s : l.sizes) total += align16(s);
    char* block = static_cast<char*>(aligned_alloc(16, total ? total : 16));
    auto** ptrs = reinterpret_cast<void**>(block);
    size_t off = align16(n * sizeof(void*));
    for (size_t i = 0; i < n; ++i) {
      ptrs[i] = block + off;
      memcpy(block + off, params[i], l.sizes[i]);
      off += align16(l.sizes[i]);
    }
    *out = ptrs;
    return std::shared_ptr<void>(block, free);
  }
  if (extra) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE: the kernel gets args[0] = a copy of the buffer.
    void* buf = nullptr;
    size_t size = 0;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = e[1];
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t*>(e[1]);
    }
    if (!buf) return nullptr;
    char* block = static_cast<char*>(aligned_alloc(16, 16 + align16(size ? size : 1)));
    memcpy(block + 16, buf, size);
    *reinterpret_cast<void**>(block) = block + 16;
    *out = reinterpret_cast<void**>(block);
    return std::shared_ptr<void>(block, free);
  }
  return nullptr;
}

}  // namespace simgpu::drv

using namespace simgpu::drv;

namespace {

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, CUstream h,
                void** params, void** extra, bool ptds) {
  if (CUresult st = init_status()) return st;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz || uint64_t(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  Op op;
  op.kind = OpKind::Kernel;
  op.a = reinterpret_cast<void*>(f);
  if (as_named_kernel(op.a)) {  // no device code to run: its parameters are never read
    op.n = uint64_t(gx) * gy * gz * bx * by * bz;
  } else {
    void** p = nullptr;
    op.ref = copy_params(op.a, params, extra, &p);
    op.b = p;
  }
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel_impl(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, CUstream h, void** params, void** extra, bool ptds) {
  LaunchKernelParams p{f, gx, gy, gz, bx, by, bz, shmem, h, params, extra};
  ApiScope api(CUPTI_CB_DOMAIN_DRIVER_API,
               ptds ? CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz : CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
               ptds ? "cuLaunchKernel_ptsz" : "cuLaunchKernel", &p, f);
  return api.done(launch(f, gx, gy, gz, bx, by, bz, h, params, extra, ptds));
}

CUresult cuLaunchKernelEx_impl(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool ptds) {
  LaunchKernelExParams p{c, f, params, extra};
  ApiScope api(CUPTI_CB_DOMAIN_DRIVER_API,
               ptds ? CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz : CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
               ptds ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx", &p, f);
  if (!c) return api.done(CUDA_ERROR_INVALID_VALUE);
  return api.done(launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream,
                         params, extra, ptds));
}

CUresult cuLaunchCooperativeKernel_impl(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shmem, CUstream h, void** params, bool ptds) {
  LaunchCooperativeKernelParams p{f, gx, gy, gz, bx, by, bz, shmem, h, params};
  ApiScope api(
      CUPTI_CB_DOMAIN_DRIVER_API,
      ptds ? CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz : CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
      ptds ? "cuLaunchCooperativeKernel_ptsz" : "cuLaunchCooperativeKernel", &p, f);
  return api.done(launch(f, gx, gy, gz, bx, by, bz, h, params, nullptr, ptds));
}

}  // namespace

SIMGPU_DEFINE_PTSZ(cuLaunchKernel,
                   (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                    unsigned int bz, unsigned int shmem, CUstream h, void** params, void** extra),
                   f, gx, gy, gz, bx, by, bz, shmem, h, params, extra)
SIMGPU_DEFINE_PTSZ(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra), config,
                   f, params, extra)
SIMGPU_DEFINE_PTSZ(cuLaunchCooperativeKernel,
                   (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                    unsigned int bz, unsigned int shmem, CUstream h, void** params),
                   f, gx, gy, gz, bx, by, bz, shmem, h, params)

// The kernel's symbol name, from the dynamic symbol table (kernels must be exported).
SIMGPU_EXPORT CUresult cuFuncGetName(const char** name, CUfunction f) {
  if (!name || !f) return CUDA_ERROR_INVALID_VALUE;
  if (const NamedKernel* k = as_named_kernel(f)) {
    *name = k->name.c_str();
    return CUDA_SUCCESS;
  }
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(f), &info) || !info.dli_sname || info.dli_saddr != reinterpret_cast<void*>(f))
    return CUDA_ERROR_NOT_FOUND;
  *name = info.dli_sname;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attr, CUfunction f) {
  if (!pi || !f) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = 49152; break;
    default: *pi = 0; break;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute, int) {
  return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache) {
  return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// CUkernel (a library's kernel, CUDA 12+): in the simulation the same handle as its CUfunction.
SIMGPU_EXPORT CUresult cuKernelGetFunction(CUfunction* out, CUkernel k) {
  if (!out || !k) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUfunction>(k);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuKernelGetName(const char** name, CUkernel k) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(k));
}

SIMGPU_EXPORT CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attr, CUkernel k, CUdevice) {
  return cuFuncGetAttribute(pi, attr, reinterpret_cast<CUfunction>(k));
}

SIMGPU_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute, int, CUkernel k, CUdevice) {
  return k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache, CUdevice) {
  return k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Occupancy: 2048 resident threads per SM, at most 32 blocks, whatever the kernel (no device
// code to inspect), so torch's launch heuristics pick the configurations they pick on a GPU.
SIMGPU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction f, int block_size,
                                                                            size_t, unsigned) {
  if (!blocks || !f || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  *blocks = std::max(1, std::min(32, 2048 / block_size));
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block_size,
                                                                   size_t shmem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, shmem, 0);
}

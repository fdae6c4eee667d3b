// Launches go to the driver's cuLaunchKernel* obtained through cuGetProcAddress, the
// _ptsz forms to the per-thread-default-stream variants, exactly like the real runtime.
#include <cupti_callbacks.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>

#include "runtime/kernel_registry.h"
#include "runtime/runtime.h"

using namespace simgpu;
using namespace simgpu::rt;

static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute), "launch attribute layouts differ");

namespace {

CUstream S(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
// A registered host stub launches its named kernel; any other pointer is a host-function kernel.
CUfunction F(const void* f) { return launch_target(f); }

cudaError_t cudaLaunchKernel_impl(const void* f, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t s,
                                  bool pt) {
  RT_ENTER();
  cudaLaunchKernel_v7000_params p{f, grid, block, args, shmem, s};
  ApiScope api(
      pt ? CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 : CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
      pt ? "cudaLaunchKernel_ptsz" : "cudaLaunchKernel", &p, f);
  if (!f) return api.done(record(cudaErrorInvalidDeviceFunction));
  return api.done(launch_error(drv(pt).cuLaunchKernel(F(f), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                                      unsigned(shmem), S(s), args, nullptr)));
}

cudaError_t cudaLaunchCooperativeKernel_impl(const void* f, dim3 grid, dim3 block, void** args, size_t shmem,
                                             cudaStream_t s, bool pt) {
  RT_ENTER();
  cudaLaunchCooperativeKernel_v9000_params p{f, grid, block, args, shmem, s};
  ApiScope api(pt ? CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000
                  : CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
               pt ? "cudaLaunchCooperativeKernel_ptsz" : "cudaLaunchCooperativeKernel", &p, f);
  if (!f) return api.done(record(cudaErrorInvalidDeviceFunction));
  return api.done(launch_error(drv(pt).cuLaunchCooperativeKernel(F(f), grid.x, grid.y, grid.z, block.x, block.y,
                                                                 block.z, unsigned(shmem), S(s), args)));
}

cudaError_t cudaLaunchKernelExC_impl(const cudaLaunchConfig_t* c, const void* f, void** args, bool pt) {
  RT_ENTER();
  cudaLaunchKernelExC_v11060_params p{c, f, args};
  ApiScope api(pt ? CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060
                  : CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
               pt ? "cudaLaunchKernelExC_ptsz" : "cudaLaunchKernelExC", &p, f);
  if (!c) return api.done(record(cudaErrorInvalidValue));
  if (!f) return api.done(record(cudaErrorInvalidDeviceFunction));
  CUlaunchConfig cu{};
  cu.gridDimX = c->gridDim.x;
  cu.gridDimY = c->gridDim.y;
  cu.gridDimZ = c->gridDim.z;
  cu.blockDimX = c->blockDim.x;
  cu.blockDimY = c->blockDim.y;
  cu.blockDimZ = c->blockDim.z;
  cu.sharedMemBytes = unsigned(c->dynamicSmemBytes);
  cu.hStream = S(c->stream);
  cu.attrs = reinterpret_cast<CUlaunchAttribute*>(c->attrs);
  cu.numAttrs = c->numAttrs;
  return api.done(launch_error(drv(pt).cuLaunchKernelEx(&cu, F(f), args, nullptr)));
}

cudaError_t cudaLaunchHostFunc_impl(cudaStream_t s, cudaHostFn_t fn, void* user, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuLaunchHostFunc(S(s), fn, user));
}

cudaError_t entry_point(const char* symbol, void** fp, int version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* status, bool pt) {
  if (!symbol || !fp) return record(cudaErrorInvalidValue);
  if (cudaError_t e = init(); e == cudaErrorInsufficientDriver) return record(e);
  cuuint64_t cuflags = flags;
  if (flags == cudaEnableDefault)
    cuflags = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  *fp = nullptr;
  drv().get_proc_address(symbol, fp, version, cuflags, &st);
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(st);
  return cudaSuccess;  // not found: success with a NULL pointer, as documented
}

cudaError_t cudaGetDriverEntryPoint_impl(const char* symbol, void** fp, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* status, bool pt) {
  return entry_point(symbol, fp, kCudaVersion, flags, status, pt);
}

cudaError_t cudaGetDriverEntryPointByVersion_impl(const char* symbol, void** fp, unsigned int version,
                                                  unsigned long long flags, cudaDriverEntryPointQueryResult* status,
                                                  bool pt) {
  return entry_point(symbol, fp, int(version), flags, status, pt);
}

}  // namespace

RT_DEFINE_PTSZ(cudaLaunchKernel, (const void* f, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t s), f,
               grid, block, args, shmem, s)
RT_DEFINE_PTSZ(cudaLaunchCooperativeKernel,
               (const void* f, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t s), f, grid, block, args,
               shmem, s)
RT_DEFINE_PTSZ(cudaLaunchKernelExC, (const cudaLaunchConfig_t* config, const void* f, void** args), config, f, args)
RT_DEFINE_PTSZ(cudaLaunchHostFunc, (cudaStream_t s, cudaHostFn_t fn, void* user), s, fn, user)
RT_DEFINE_PTSZ(cudaGetDriverEntryPoint,
               (const char* symbol, void** fp, unsigned long long flags, cudaDriverEntryPointQueryResult* status),
               symbol, fp, flags, status)
RT_DEFINE_PTSZ(cudaGetDriverEntryPointByVersion,
               (const char* symbol, void** fp, unsigned int version, unsigned long long flags,
                cudaDriverEntryPointQueryResult* status),
               symbol, fp, version, flags, status)

// The kernel's symbol name (the host function must be exported, see simgpu/kernel.h).
SIMGPU_EXPORT cudaError_t cudaFuncGetName(const char** name, const void* f) {
  if (!name) return record(cudaErrorInvalidValue);
  RT_ENTER();
  if (!f || drv().cuFuncGetName(name, F(f)) != CUDA_SUCCESS) return record(cudaErrorInvalidDeviceFunction);
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t* out, const void* symbol) {
  if (!out || !symbol) return record(cudaErrorInvalidValue);
  RT_ENTER();
  *out = reinterpret_cast<cudaFunction_t>(F(symbol));
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void* f) {
  if (!a || !f) return record(cudaErrorInvalidValue);
  RT_ENTER();
  *a = cudaFuncAttributes{};
  int v = 0;
  drv().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, F(f));
  a->maxThreadsPerBlock = v;
  drv().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, F(f));
  a->numRegs = v;
  drv().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, F(f));
  a->ptxVersion = v;
  drv().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, F(f));
  a->binaryVersion = v;
  drv().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, F(f));
  a->maxDynamicSharedSizeBytes = v;
  return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaFuncSetAttribute(const void* f, cudaFuncAttribute attr, int value) {
  RT_ENTER();
  return from(drv().cuFuncSetAttribute(F(f), static_cast<CUfunction_attribute>(attr), value));
}

SIMGPU_EXPORT cudaError_t cudaFuncSetCacheConfig(const void* f, cudaFuncCache) {
  RT_ENTER();
  return f ? cudaSuccess : record(cudaErrorInvalidDeviceFunction);
}

SIMGPU_EXPORT cudaError_t cudaProfilerStart() { return cudaSuccess; }
SIMGPU_EXPORT cudaError_t cudaProfilerStop() { return cudaSuccess; }

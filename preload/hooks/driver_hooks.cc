// Driver launches (cuLaunchKernel, cuLaunchKernelEx and their _ptsz forms) and the lookup
// function cuGetProcAddress, through which CUDA >= 12 programs find them.
#include "preload/hooks/driver_hooks.h"

#include <cuda.h>

#include <cstring>

// cuda.h maps the name to the CUDA 12 ABI (cuGetProcAddress_v2); both ABIs are exported by the
// driver and both are hooked, so the name must mean the old 4-argument one here.
#undef cuGetProcAddress

#include "preload/base/real_function.h"
#include "preload/hooks/timed_call.h"

namespace xtimer {
namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using ProcV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
using ProcV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

RealFunction<LaunchFn> real_launch("cuLaunchKernel", Lib::kCuda);
RealFunction<LaunchFn> real_launch_ptsz("cuLaunchKernel_ptsz", Lib::kCuda);
RealFunction<LaunchExFn> real_launch_ex("cuLaunchKernelEx", Lib::kCuda);
RealFunction<LaunchExFn> real_launch_ex_ptsz("cuLaunchKernelEx_ptsz", Lib::kCuda);
RealFunction<ProcV1Fn> real_proc_v1("cuGetProcAddress", Lib::kCuda);
RealFunction<ProcV2Fn> real_proc_v2("cuGetProcAddress_v2", Lib::kCuda);

// A driver launch of CUfunction `f` (named with cuFuncGetName).
template <typename Fn, typename Call>
CUresult DriverLaunch(RealFunction<Fn>& real, CUfunction f, CUstream stream, bool per_thread, Call&& call) {
  OpKey key;
  key.kind = OpKind::kKernel;
  key.func = f;
  key.a = 1;  // a CUfunction, not a runtime stub
  OpPlace where{stream, gpu::Path::kDriver, per_thread, -1};
  return KernelLaunch(real, CUDA_ERROR_NOT_INITIALIZED, key, where, false, call);
}

}  // namespace
}  // namespace xtimer

using namespace xtimer;

XTIMER_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                      unsigned bz, unsigned shmem, CUstream stream, void** params, void** extra) {
  return DriverLaunch(real_launch, f, stream, false,
                      [&](LaunchFn fn) { return fn(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra); });
}

XTIMER_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                           unsigned by, unsigned bz, unsigned shmem, CUstream stream, void** params,
                                           void** extra) {
  return DriverLaunch(real_launch_ptsz, f, stream, true,
                      [&](LaunchFn fn) { return fn(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra); });
}

XTIMER_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  CUstream stream = config != nullptr ? config->hStream : nullptr;
  return DriverLaunch(real_launch_ex, f, stream, false, [&](LaunchExFn fn) { return fn(config, f, params, extra); });
}

XTIMER_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  CUstream stream = config != nullptr ? config->hStream : nullptr;
  return DriverLaunch(real_launch_ex_ptsz, f, stream, true,
                      [&](LaunchExFn fn) { return fn(config, f, params, extra); });
}

namespace xtimer {
namespace {

// What cuGetProcAddress hands out for a hooked name. `per_thread` (the
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM flag) selects the _ptsz variant;
// `cuda_version` selects the ABI of cuGetProcAddress itself (v2 from CUDA 12.0).
void* SwapForProcAddress(const char* symbol, void* real, bool per_thread, int cuda_version) {
  if (std::strcmp(symbol, "cuGetProcAddress") == 0)
    return DriverHookFor(cuda_version >= 12000 ? "cuGetProcAddress_v2" : "cuGetProcAddress", real);
  if (std::strcmp(symbol, "cuLaunchKernel") == 0)
    return DriverHookFor(per_thread ? "cuLaunchKernel_ptsz" : "cuLaunchKernel", real);
  if (std::strcmp(symbol, "cuLaunchKernelEx") == 0)
    return DriverHookFor(per_thread ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx", real);
  return nullptr;
}

}  // namespace
}  // namespace xtimer

XTIMER_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  ProcV2Fn fn = real_proc_v2.get_or_report();
  if (fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = fn(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (void* hook = SwapForProcAddress(symbol, *pfn, per_thread, cuda_version)) *pfn = hook;
  }
  return r;
}

XTIMER_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  ProcV1Fn fn = real_proc_v1.get_or_report();
  if (fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = fn(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (void* hook = SwapForProcAddress(symbol, *pfn, per_thread, cuda_version)) *pfn = hook;
  }
  return r;
}

namespace xtimer {

namespace {
struct DriverHook {
  const char* name;
  void* hook;
  void (*remember)(void*);
};

const DriverHook kDriverHooks[] = {
    {"cuLaunchKernel", reinterpret_cast<void*>(&::cuLaunchKernel), [](void* r) { real_launch.set(r); }},
    {"cuLaunchKernel_ptsz", reinterpret_cast<void*>(&::cuLaunchKernel_ptsz), [](void* r) { real_launch_ptsz.set(r); }},
    {"cuLaunchKernelEx", reinterpret_cast<void*>(&::cuLaunchKernelEx), [](void* r) { real_launch_ex.set(r); }},
    {"cuLaunchKernelEx_ptsz", reinterpret_cast<void*>(&::cuLaunchKernelEx_ptsz),
     [](void* r) { real_launch_ex_ptsz.set(r); }},
    {"cuGetProcAddress", reinterpret_cast<void*>(&::cuGetProcAddress), [](void* r) { real_proc_v1.set(r); }},
    {"cuGetProcAddress_v2", reinterpret_cast<void*>(&::cuGetProcAddress_v2), [](void* r) { real_proc_v2.set(r); }},
};
}  // namespace

void* DriverHookFor(const char* name, void* real) {
  for (const DriverHook& h : kDriverHooks) {
    if (std::strcmp(name, h.name) != 0) continue;
    if (real == h.hook) return h.hook;  // already ours (looked up through our own export)
    h.remember(real);
    return h.hook;
  }
  return nullptr;
}

}  // namespace xtimer

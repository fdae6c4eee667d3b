// CUDA runtime launches and copies: cudaLaunchKernel and its relatives (plain and _ptsz, the
// per-thread-default-stream forms that nvcc's --default-stream per-thread selects),
// cudaGraphLaunch and cudaMemcpyAsync. Synchronising calls are in sync_hooks.cc.
#include <cuda_runtime_api.h>

#include "preload/base/real_function.h"
#include "preload/hooks/timed_call.h"

namespace xtimer {
namespace {

using LaunchFn = decltype(&::cudaLaunchKernel);
using LaunchExFn = decltype(&::cudaLaunchKernelExC);
using GraphLaunchFn = decltype(&::cudaGraphLaunch);
using MemcpyAsyncFn = decltype(&::cudaMemcpyAsync);

RealFunction<LaunchFn> real_launch("cudaLaunchKernel", Lib::kCudart);
RealFunction<LaunchFn> real_launch_ptsz("cudaLaunchKernel_ptsz", Lib::kCudart);
RealFunction<LaunchExFn> real_launch_ex("cudaLaunchKernelExC", Lib::kCudart);
RealFunction<LaunchExFn> real_launch_ex_ptsz("cudaLaunchKernelExC_ptsz", Lib::kCudart);
RealFunction<LaunchFn> real_coop("cudaLaunchCooperativeKernel", Lib::kCudart);
RealFunction<LaunchFn> real_coop_ptsz("cudaLaunchCooperativeKernel_ptsz", Lib::kCudart);
RealFunction<GraphLaunchFn> real_graph("cudaGraphLaunch", Lib::kCudart);
RealFunction<GraphLaunchFn> real_graph_ptsz("cudaGraphLaunch_ptsz", Lib::kCudart);
RealFunction<MemcpyAsyncFn> real_memcpy_async("cudaMemcpyAsync", Lib::kCudart);
RealFunction<MemcpyAsyncFn> real_memcpy_async_ptsz("cudaMemcpyAsync_ptsz", Lib::kCudart);

// A runtime launch of `func` (a kernel's host stub, or an executable graph when `api` names it).
template <typename Fn, typename Call>
cudaError_t RuntimeLaunch(RealFunction<Fn>& real, const void* func, const char* api, cudaStream_t stream,
                          bool per_thread, bool always_time, Call&& call) {
  OpKey key;
  key.kind = OpKind::kKernel;
  key.api = api;  // nullptr for kernels: named by their symbol
  key.func = func;
  OpPlace where{stream, gpu::Path::kRuntime, per_thread, -1};
  return KernelLaunch(real, cudaErrorInitializationError, key, where, always_time, call);
}

cudaError_t MemcpyAsync(RealFunction<MemcpyAsyncFn>& real, void* dst, const void* src, size_t count,
                        cudaMemcpyKind kind, cudaStream_t stream, bool per_thread) {
  HookEntry<MemcpyAsyncFn> hook(real);
  MemcpyAsyncFn fn = hook.fn;
  Tracker* t = hook.tracker;
  if (fn == nullptr) return cudaErrorInitializationError;
  if (t == nullptr) return fn(dst, src, count, kind, stream);
  if (t->cupti()) {  // CUPTI mode: the copy's activity record times it
    cudaError_t r = fn(dst, src, count, kind, stream);
    t->AfterRealCall();
    return r;
  }
  OpKey key;
  key.kind = OpKind::kMemcpy;
  key.api = "cudaMemcpyAsync";
  key.a = kind;
  uint32_t cls = t->Intern(key);
  OpRecord rec;
  rec.bytes = count;
  OpPlace where{stream, gpu::Path::kRuntime, per_thread, -1};
  return TimedCall<cudaError_t>(t, cls, where, rec, [&] { return fn(dst, src, count, kind, stream); });
}

}  // namespace
}  // namespace xtimer

using namespace xtimer;

XTIMER_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                           cudaStream_t stream) {
  return RuntimeLaunch(real_launch, func, nullptr, stream, false, false,
                       [&](LaunchFn f) { return f(func, grid, block, args, shmem, stream); });
}

XTIMER_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                                cudaStream_t stream) {
  return RuntimeLaunch(real_launch_ptsz, func, nullptr, stream, true, false,
                       [&](LaunchFn f) { return f(func, grid, block, args, shmem, stream); });
}

XTIMER_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  cudaStream_t stream = config != nullptr ? config->stream : nullptr;
  return RuntimeLaunch(real_launch_ex, func, nullptr, stream, false, false,
                       [&](LaunchExFn f) { return f(config, func, args); });
}

XTIMER_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  cudaStream_t stream = config != nullptr ? config->stream : nullptr;
  return RuntimeLaunch(real_launch_ex_ptsz, func, nullptr, stream, true, false,
                       [&](LaunchExFn f) { return f(config, func, args); });
}

XTIMER_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                                      size_t shmem, cudaStream_t stream) {
  return RuntimeLaunch(real_coop, func, nullptr, stream, false, false,
                       [&](LaunchFn f) { return f(func, grid, block, args, shmem, stream); });
}

XTIMER_EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                                           size_t shmem, cudaStream_t stream) {
  return RuntimeLaunch(real_coop_ptsz, func, nullptr, stream, true, false,
                       [&](LaunchFn f) { return f(func, grid, block, args, shmem, stream); });
}

// A graph replays many kernels; it is timed as one op per executable graph, always.
XTIMER_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graph, cudaStream_t stream) {
  return RuntimeLaunch(real_graph, graph, "cudaGraphLaunch", stream, false, true,
                       [&](GraphLaunchFn f) { return f(graph, stream); });
}

XTIMER_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graph, cudaStream_t stream) {
  return RuntimeLaunch(real_graph_ptsz, graph, "cudaGraphLaunch", stream, true, true,
                       [&](GraphLaunchFn f) { return f(graph, stream); });
}

XTIMER_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                          cudaStream_t stream) {
  return MemcpyAsync(real_memcpy_async, dst, src, count, kind, stream, false);
}

XTIMER_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return MemcpyAsync(real_memcpy_async_ptsz, dst, src, count, kind, stream, true);
}

// cuGetProcAddress: the way the runtime, cuBLAS, NCCL, Triton and PyTorch reach the driver.
// Base names map to the newest ABI version; the per-thread flag selects _ptsz/_ptds twins.
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "driver/driver.h"

using namespace simgpu::drv;

extern "C" CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

namespace {

struct Entry {
  void* legacy;
  void* per_thread;
};

// One entry per line, no separators (the macros end in a comma): clang-format cannot lay that
// out and would pile the entries up, differently on each run.
// clang-format off
#define E(name, fn) {name, {reinterpret_cast<void*>(&fn), nullptr}},
#define P(name, fn, ptfn) {name, {reinterpret_cast<void*>(&fn), reinterpret_cast<void*>(&ptfn)}},

const std::unordered_map<std::string_view, Entry>& table() {
  static const auto* t = new std::unordered_map<std::string_view, Entry>{
      E("cuInit", cuInit)
      E("cuDriverGetVersion", cuDriverGetVersion)
      E("cuDeviceGet", cuDeviceGet)
      E("cuDeviceGetCount", cuDeviceGetCount)
      E("cuDeviceGetName", cuDeviceGetName)
      E("cuDeviceTotalMem", cuDeviceTotalMem_v2)
      E("cuDeviceGetAttribute", cuDeviceGetAttribute)
      E("cuDeviceGetUuid", cuDeviceGetUuid_v2)
      E("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId)
      E("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)
      E("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2)
      E("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2)
      E("cuDevicePrimaryCtxSetFlags", cuDevicePrimaryCtxSetFlags_v2)
      E("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState)
      E("cuCtxGetCurrent", cuCtxGetCurrent)
      E("cuCtxSetCurrent", cuCtxSetCurrent)
      E("cuCtxPushCurrent", cuCtxPushCurrent_v2)
      E("cuCtxPopCurrent", cuCtxPopCurrent_v2)
      E("cuCtxGetDevice", cuCtxGetDevice)
      E("cuCtxSynchronize", cuCtxSynchronize)
      E("cuCtxGetStreamPriorityRange", cuCtxGetStreamPriorityRange)
      E("cuCtxGetApiVersion", cuCtxGetApiVersion)
      E("cuGetErrorString", cuGetErrorString)
      E("cuGetErrorName", cuGetErrorName)
      E("cuGetProcAddress", cuGetProcAddress_v2)
      E("cuStreamCreate", cuStreamCreate)
      E("cuStreamCreateWithPriority", cuStreamCreateWithPriority)
      E("cuStreamDestroy", cuStreamDestroy_v2)
      P("cuStreamSynchronize", cuStreamSynchronize, cuStreamSynchronize_ptsz)
      P("cuStreamQuery", cuStreamQuery, cuStreamQuery_ptsz)
      P("cuStreamWaitEvent", cuStreamWaitEvent, cuStreamWaitEvent_ptsz)
      P("cuStreamGetFlags", cuStreamGetFlags, cuStreamGetFlags_ptsz)
      P("cuStreamGetPriority", cuStreamGetPriority, cuStreamGetPriority_ptsz)
      P("cuStreamGetId", cuStreamGetId, cuStreamGetId_ptsz)
      P("cuStreamGetCtx", cuStreamGetCtx, cuStreamGetCtx_ptsz)
      P("cuStreamGetDevice", cuStreamGetDevice, cuStreamGetDevice_ptsz)
      P("cuStreamAddCallback", cuStreamAddCallback, cuStreamAddCallback_ptsz)
      P("cuLaunchHostFunc", cuLaunchHostFunc, cuLaunchHostFunc_ptsz)
      P("cuStreamBeginCapture", cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz)
      P("cuStreamEndCapture", cuStreamEndCapture, cuStreamEndCapture_ptsz)
      P("cuStreamIsCapturing", cuStreamIsCapturing, cuStreamIsCapturing_ptsz)
      P("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz)
      E("cuEventCreate", cuEventCreate)
      E("cuEventDestroy", cuEventDestroy_v2)
      P("cuEventRecord", cuEventRecord, cuEventRecord_ptsz)
      P("cuEventRecordWithFlags", cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz)
      E("cuEventQuery", cuEventQuery)
      E("cuEventSynchronize", cuEventSynchronize)
      E("cuEventElapsedTime", cuEventElapsedTime_v2)
      P("cuLaunchKernel", cuLaunchKernel, cuLaunchKernel_ptsz)
      P("cuLaunchKernelEx", cuLaunchKernelEx, cuLaunchKernelEx_ptsz)
      P("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz)
      E("cuFuncGetName", cuFuncGetName)
      E("cuFuncGetAttribute", cuFuncGetAttribute)
      E("cuFuncSetAttribute", cuFuncSetAttribute)
      E("cuKernelGetFunction", cuKernelGetFunction)
      E("cuKernelGetName", cuKernelGetName)
      E("cuKernelGetAttribute", cuKernelGetAttribute)
      E("cuKernelSetAttribute", cuKernelSetAttribute)
      E("cuKernelSetCacheConfig", cuKernelSetCacheConfig)
      E("cuOccupancyMaxActiveBlocksPerMultiprocessor", cuOccupancyMaxActiveBlocksPerMultiprocessor)
      E("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
      E("cuFuncSetCacheConfig", cuFuncSetCacheConfig)
      E("cuMemAlloc", cuMemAlloc_v2)
      E("cuMemAllocManaged", cuMemAllocManaged)
      E("cuMemAllocPitch", cuMemAllocPitch_v2)
      E("cuMemFree", cuMemFree_v2)
      E("cuMemAllocHost", cuMemAllocHost_v2)
      E("cuMemHostAlloc", cuMemHostAlloc)
      E("cuMemFreeHost", cuMemFreeHost)
      E("cuMemHostRegister", cuMemHostRegister_v2)
      E("cuMemHostUnregister", cuMemHostUnregister)
      E("cuMemHostGetFlags", cuMemHostGetFlags)
      E("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2)
      E("cuMemGetInfo", cuMemGetInfo_v2)
      E("cuMemGetAddressRange", cuMemGetAddressRange_v2)
      E("cuPointerGetAttribute", cuPointerGetAttribute)
      P("cuMemcpy", cuMemcpy, cuMemcpy_ptds)
      P("cuMemcpyHtoD", cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds)
      P("cuMemcpyDtoH", cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds)
      P("cuMemcpyDtoD", cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds)
      P("cuMemcpyPeer", cuMemcpyPeer, cuMemcpyPeer_ptds)
      P("cuMemcpyAsync", cuMemcpyAsync, cuMemcpyAsync_ptsz)
      P("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz)
      P("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz)
      P("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz)
      P("cuMemcpyPeerAsync", cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz)
      P("cuMemsetD8", cuMemsetD8_v2, cuMemsetD8_v2_ptds)
      P("cuMemsetD16", cuMemsetD16_v2, cuMemsetD16_v2_ptds)
      P("cuMemsetD32", cuMemsetD32_v2, cuMemsetD32_v2_ptds)
      P("cuMemsetD8Async", cuMemsetD8Async, cuMemsetD8Async_ptsz)
      P("cuMemsetD16Async", cuMemsetD16Async, cuMemsetD16Async_ptsz)
      P("cuMemsetD32Async", cuMemsetD32Async, cuMemsetD32Async_ptsz)
      P("cuMemAllocAsync", cuMemAllocAsync, cuMemAllocAsync_ptsz)
      P("cuMemFreeAsync", cuMemFreeAsync, cuMemFreeAsync_ptsz)
      E("cuGraphCreate", cuGraphCreate)
      E("cuGraphInstantiate", cuGraphInstantiateWithFlags)
      E("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags)
      P("cuGraphLaunch", cuGraphLaunch, cuGraphLaunch_ptsz)
      P("cuGraphUpload", cuGraphUpload, cuGraphUpload_ptsz)
      E("cuGraphExecDestroy", cuGraphExecDestroy)
      E("cuGraphDestroy", cuGraphDestroy)
      E("cuThreadExchangeStreamCaptureMode", cuThreadExchangeStreamCaptureMode)
  };
  return *t;
}

#undef E
#undef P
// clang-format on

}  // namespace

SIMGPU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const auto& t = table();
  auto it = t.find(symbol);
  if (it == t.end()) {
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  const bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = (ptds && it->second.per_thread) ? it->second.per_thread : it->second.legacy;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

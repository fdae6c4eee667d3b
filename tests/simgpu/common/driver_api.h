// How the simulated runtime, cuBLAS and NCCL reach the driver: exactly like the real
// libraries, by dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2") and then every
// entry point through cuGetProcAddress. Nothing links libcuda directly, so a preloaded
// library that interposes dlsym/cuGetProcAddress sees every driver call they make.
#pragma once
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

// X(member, "name passed to cuGetProcAddress")
#define SIMGPU_DRIVER_FUNCS(X)                                                                                    \
  X(cuInit, "cuInit")                                                                                             \
  X(cuDriverGetVersion, "cuDriverGetVersion")                                                                     \
  X(cuDeviceGet, "cuDeviceGet")                                                                                   \
  X(cuDeviceGetCount, "cuDeviceGetCount")                                                                         \
  X(cuDeviceGetName, "cuDeviceGetName")                                                                           \
  X(cuDeviceTotalMem_v2, "cuDeviceTotalMem")                                                                      \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                                 \
  X(cuDeviceGetUuid_v2, "cuDeviceGetUuid")                                                                        \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")                                                                   \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                                         \
  X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease")                                                    \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset")                                                        \
  X(cuDevicePrimaryCtxSetFlags_v2, "cuDevicePrimaryCtxSetFlags")                                                  \
  X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState")                                                     \
  X(cuCtxGetCurrent, "cuCtxGetCurrent")                                                                           \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                                           \
  X(cuCtxGetDevice, "cuCtxGetDevice")                                                                             \
  X(cuCtxSynchronize, "cuCtxSynchronize")                                                                         \
  X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange")                                                   \
  X(cuGetErrorString, "cuGetErrorString")                                                                         \
  X(cuGetErrorName, "cuGetErrorName")                                                                             \
  X(cuGetProcAddress_v2, "cuGetProcAddress")                                                                      \
  X(cuStreamCreate, "cuStreamCreate")                                                                             \
  X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority")                                                     \
  X(cuStreamDestroy_v2, "cuStreamDestroy")                                                                        \
  X(cuStreamSynchronize, "cuStreamSynchronize")                                                                   \
  X(cuStreamQuery, "cuStreamQuery")                                                                               \
  X(cuStreamWaitEvent, "cuStreamWaitEvent")                                                                       \
  X(cuStreamGetFlags, "cuStreamGetFlags")                                                                         \
  X(cuStreamGetPriority, "cuStreamGetPriority")                                                                   \
  X(cuStreamGetId, "cuStreamGetId")                                                                               \
  X(cuStreamGetCtx, "cuStreamGetCtx")                                                                             \
  X(cuStreamAddCallback, "cuStreamAddCallback")                                                                   \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture")                                                              \
  X(cuStreamEndCapture, "cuStreamEndCapture")                                                                     \
  X(cuStreamIsCapturing, "cuStreamIsCapturing")                                                                   \
  X(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo")                                                          \
  X(cuEventCreate, "cuEventCreate")                                                                               \
  X(cuEventDestroy_v2, "cuEventDestroy")                                                                          \
  X(cuEventRecord, "cuEventRecord")                                                                               \
  X(cuEventRecordWithFlags, "cuEventRecordWithFlags")                                                             \
  X(cuEventQuery, "cuEventQuery")                                                                                 \
  X(cuEventSynchronize, "cuEventSynchronize")                                                                     \
  X(cuEventElapsedTime_v2, "cuEventElapsedTime")                                                                  \
  X(cuLaunchKernel, "cuLaunchKernel")                                                                             \
  X(cuLaunchKernelEx, "cuLaunchKernelEx")                                                                         \
  X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel")                                                       \
  X(cuLaunchHostFunc, "cuLaunchHostFunc")                                                                         \
  X(cuFuncGetName, "cuFuncGetName")                                                                               \
  X(cuFuncGetAttribute, "cuFuncGetAttribute")                                                                     \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                                                                     \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags") \
  X(cuMemAlloc_v2, "cuMemAlloc")                                                                                  \
  X(cuMemAllocManaged, "cuMemAllocManaged")                                                                       \
  X(cuMemFree_v2, "cuMemFree")                                                                                    \
  X(cuMemAllocHost_v2, "cuMemAllocHost")                                                                          \
  X(cuMemHostAlloc, "cuMemHostAlloc")                                                                             \
  X(cuMemFreeHost, "cuMemFreeHost")                                                                               \
  X(cuMemHostRegister_v2, "cuMemHostRegister")                                                                    \
  X(cuMemHostUnregister, "cuMemHostUnregister")                                                                   \
  X(cuMemHostGetFlags, "cuMemHostGetFlags")                                                                       \
  X(cuMemGetInfo_v2, "cuMemGetInfo")                                                                              \
  X(cuMemcpy, "cuMemcpy")                                                                                         \
  X(cuMemcpyAsync, "cuMemcpyAsync")                                                                               \
  X(cuMemsetD8_v2, "cuMemsetD8")                                                                                  \
  X(cuMemsetD8Async, "cuMemsetD8Async")                                                                           \
  X(cuMemAllocAsync, "cuMemAllocAsync")                                                                           \
  X(cuMemFreeAsync, "cuMemFreeAsync")                                                                             \
  X(cuPointerGetAttribute, "cuPointerGetAttribute")                                                               \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiate")                                                            \
  X(cuGraphLaunch, "cuGraphLaunch")                                                                               \
  X(cuGraphUpload, "cuGraphUpload")                                                                               \
  X(cuGraphExecDestroy, "cuGraphExecDestroy")                                                                     \
  X(cuGraphDestroy, "cuGraphDestroy")

namespace simgpu {

struct ApiCall;

struct DriverApi {
  // What dlsym(libcuda, "cuGetProcAddress_v2") returned: the runtime answers
  // cudaGetDriverEntryPoint with it, so a dlsym hook also sees those lookups.
  decltype(&::cuGetProcAddress_v2) get_proc_address = nullptr;
  // simgpu_kernel_sleep_ns from the simulated libcuda (device-time sleep inside a kernel).
  void (*kernel_sleep_ns)(int64_t) = nullptr;
  // simgpu_api_enter/exit from the simulated libcuda (common/activity.h): how the runtime
  // reports its own API calls for the simulated libcupti's callbacks.
  void (*api_enter)(ApiCall*) = nullptr;
  void (*api_exit)(ApiCall*) = nullptr;
  // simgpu_named_kernel from the simulated libcuda (driver/named_kernel.h): the handle of a
  // registered kernel, by its device name.
  void* (*named_kernel)(const char*) = nullptr;
#define SIMGPU_DECLARE_MEMBER(member, sym) decltype(&::member) member = nullptr;
  SIMGPU_DRIVER_FUNCS(SIMGPU_DECLARE_MEMBER)
#undef SIMGPU_DECLARE_MEMBER
};

// The driver's entry points, looked up once with the legacy-default-stream flavour or
// the per-thread one (the _ptsz/_ptds variants). nullptr when libcuda.so.1 cannot be
// loaded or lacks cuGetProcAddress_v2.
const DriverApi* driver_api(bool per_thread_default_stream = false);

// CUDA version the simulated libraries were "built" for (13.0).
constexpr int kCudaVersion = 13000;

}  // namespace simgpu

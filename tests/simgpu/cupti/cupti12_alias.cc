// Simulated libcupti.so.12, for CUPTI clients built against CUDA 12 (nvidia-resiliency-ext 0.4.1's
// straggler module, nvrx_cupti_module, links libcupti.so.12). Each function forwards to the
// simulated libcupti.so.13 beside it, so a process has one CUPTI, with its one set of activity
// callbacks and its one subscriber, whichever soname its clients linked. The CUDA 12 kernel record
// (CUpti_ActivityKernel9) and the CUDA 13 one written here (CUpti_ActivityKernel10) agree up to
// and including `name`; a CUDA 12 client reading later members reads the CUDA 13 ones.
// Only the Activity API calls such a client makes are here (libcupti12.map lists them).
#include <cupti.h>
#include <dlfcn.h>

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The libcupti.so.13 function `name`, or nullptr when that library is not beside this one.
void* Cupti13(const char* name) {
  static void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_GLOBAL);
  return lib ? dlsym(lib, name) : nullptr;
}

template <typename Fn, typename... Args>
CUptiResult Forward(const char* name, Args... args) {
  auto fn = reinterpret_cast<Fn>(Cupti13(name));
  return fn ? fn(args...) : CUPTI_ERROR_NOT_INITIALIZED;
}

}  // namespace

#define SIMGPU_FORWARD(name, ...) Forward<decltype(&::name)>(#name, __VA_ARGS__)

SIMGPU_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  return SIMGPU_FORWARD(cuptiGetResultString, result, str);
}
SIMGPU_EXPORT CUptiResult cuptiGetVersion(uint32_t* version) { return SIMGPU_FORWARD(cuptiGetVersion, version); }
SIMGPU_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  return SIMGPU_FORWARD(cuptiGetTimestamp, timestamp);
}
SIMGPU_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                         CUpti_BuffersCallbackCompleteFunc completed) {
  return SIMGPU_FORWARD(cuptiActivityRegisterCallbacks, requested, completed);
}
SIMGPU_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  return SIMGPU_FORWARD(cuptiActivityEnable, kind);
}
SIMGPU_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  return SIMGPU_FORWARD(cuptiActivityDisable, kind);
}
SIMGPU_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) { return SIMGPU_FORWARD(cuptiActivityFlushAll, flag); }
SIMGPU_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  return SIMGPU_FORWARD(cuptiActivityGetNextRecord, buffer, valid, record);
}
SIMGPU_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream, size_t* dropped) {
  return SIMGPU_FORWARD(cuptiActivityGetNumDroppedRecords, context, stream, dropped);
}
SIMGPU_EXPORT CUptiResult cuptiFinalize() { return Forward<decltype(&::cuptiFinalize)>("cuptiFinalize"); }

#include "common/driver_api.h"

#include <dlfcn.h>

#include <mutex>

#include "common/simgpu_env.h"

namespace simgpu {
namespace {

bool load(DriverApi* api, bool ptds) {
  // Same calls as the real cudart: a preloaded dlsym hook can catch this lookup.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    log("dlopen(libcuda.so.1) failed: %s", dlerror());
    return false;
  }
  auto gpa = reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!gpa) {
    log("libcuda.so.1 has no cuGetProcAddress_v2");
    return false;
  }
  api->get_proc_address = gpa;
  api->kernel_sleep_ns = reinterpret_cast<void (*)(int64_t)>(dlsym(lib, "simgpu_kernel_sleep_ns"));
  api->api_enter = reinterpret_cast<void (*)(ApiCall*)>(dlsym(lib, "simgpu_api_enter"));
  api->api_exit = reinterpret_cast<void (*)(ApiCall*)>(dlsym(lib, "simgpu_api_exit"));
  api->named_kernel = reinterpret_cast<void* (*)(const char*)>(dlsym(lib, "simgpu_named_kernel"));
  const cuuint64_t flags = ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  bool ok = true;
#define SIMGPU_RESOLVE(member, sym)                                     \
  {                                                                     \
    void* p = nullptr;                                                  \
    CUdriverProcAddressQueryResult st{};                                \
    if (gpa(sym, &p, kCudaVersion, flags, &st) != CUDA_SUCCESS || !p) { \
      log("cuGetProcAddress(%s) failed", sym);                          \
      ok = false;                                                       \
    }                                                                   \
    api->member = reinterpret_cast<decltype(api->member)>(p);           \
  }
  SIMGPU_DRIVER_FUNCS(SIMGPU_RESOLVE)
#undef SIMGPU_RESOLVE
  return ok;
}

}  // namespace

const DriverApi* driver_api(bool ptds) {
  // Leaked on purpose: stream workers may still call through it during exit().
  static DriverApi* apis[2];
  static std::once_flag once[2];
  const int i = ptds ? 1 : 0;
  std::call_once(once[i], [&] {
    auto* api = new DriverApi;
    if (load(api, ptds)) apis[i] = api;
  });
  return apis[i];
}

}  // namespace simgpu

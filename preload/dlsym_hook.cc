// Interposed dlsym. The CUDA runtime (also the copy linked statically into NCCL and cuBLAS),
// Triton and PyTorch reach the driver with dlopen("libcuda.so.1") + dlsym(handle, ...), which
// LD_PRELOAD alone never sees. For the few driver entry points we hook (cuGetProcAddress* and
// cuLaunchKernel*) we hand out our hook and remember the real address; every other lookup is a
// sibling call into libc's dlsym, so the caller's return address (which RTLD_NEXT depends on) is
// preserved. tests/preload checks that RTLD_NEXT lookups from other libraries still resolve.
#include <dlfcn.h>

#include "preload/driver_hooks.h"
#include "preload/real_function.h"

namespace {

// Cheap pre-filter so the common case costs two byte compares.
inline bool MaybeHookedDriverName(const char* name) {
  return name != nullptr && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

__attribute__((noinline)) void* DlsymForDriverName(void* handle, const char* name) {
  void* real = xtimer::RealDlsym(handle, name);
  if (real == nullptr) return nullptr;
  void* hook = xtimer::DriverHookFor(name, real);
  return hook != nullptr ? hook : real;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  if (MaybeHookedDriverName(name) && xtimer::IsHookedDriverName(name)) [[unlikely]] {
    // RTLD_NEXT for these few names resolves relative to this library, which is the first
    // preloaded one; good enough for the names we hook.
    return DlsymForDriverName(handle, name);
  }
  xtimer::DlsymFn libc_dlsym = xtimer::LibcDlsym();
  return libc_dlsym(handle, name);  // sibling call (a jmp): keeps the caller's return address
}

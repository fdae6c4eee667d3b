// A miniature of what the preloaded xtimer library does, to test the wiring it relies on:
// interpose dlsym, hand out a wrapped cuGetProcAddress_v2, and wrap the cuLaunchKernel*
// pointers it returns. Counts launches by kernel name (LD_PRELOAD only; tests read the
// counts through simgpu_spy_launches).
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

using dlsym_fn = void* (*)(void*, const char*);
using gpa_fn = decltype(&cuGetProcAddress_v2);
using launch_fn = decltype(&cuLaunchKernel);
using launch_ex_fn = decltype(&cuLaunchKernelEx);

// libc's dlsym. (Handles passed as RTLD_NEXT are answered relative to this library, which
// is good enough for these tests.)
dlsym_fn real_dlsym() {
  static std::atomic<dlsym_fn> fn{nullptr};
  dlsym_fn f = fn.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (!f) f = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
    fn.store(f, std::memory_order_release);
  }
  return f;
}

std::mutex g_mu;
std::map<std::string, int>* g_launches = new std::map<std::string, int>;
std::map<std::string, int>* g_lookups = new std::map<std::string, int>;
gpa_fn g_real_gpa = nullptr;
launch_fn g_real_launch[2] = {};
launch_ex_fn g_real_launch_ex[2] = {};

void count(CUfunction f) {
  Dl_info info{};
  const char* name = dladdr(reinterpret_cast<void*>(f), &info) && info.dli_sname ? info.dli_sname : "?";
  std::lock_guard lk(g_mu);
  ++(*g_launches)[name];
}

template <int PT>
CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shmem, CUstream s, void** params, void** extra) {
  count(f);
  return g_real_launch[PT](f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

template <int PT>
CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  count(f);
  return g_real_launch_ex[PT](c, f, params, extra);
}

CUresult gpa(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* st) {
  CUresult r = g_real_gpa(symbol, pfn, version, flags, st);
  if (r != CUDA_SUCCESS || !*pfn) return r;
  const int pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
  {
    std::lock_guard lk(g_mu);
    ++(*g_lookups)[symbol];
  }
  if (strcmp(symbol, "cuLaunchKernel") == 0) {
    g_real_launch[pt] = reinterpret_cast<launch_fn>(*pfn);
    *pfn = reinterpret_cast<void*>(pt ? &launch<1> : &launch<0>);
  } else if (strcmp(symbol, "cuLaunchKernelEx") == 0) {
    g_real_launch_ex[pt] = reinterpret_cast<launch_ex_fn>(*pfn);
    *pfn = reinterpret_cast<void*>(pt ? &launch_ex<1> : &launch_ex<0>);
  }
  return r;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  void* p = real_dlsym()(handle, name);
  if (p && strcmp(name, "cuGetProcAddress_v2") == 0) {
    g_real_gpa = reinterpret_cast<gpa_fn>(p);
    return reinterpret_cast<void*>(&gpa);
  }
  return p;
}

extern "C" __attribute__((visibility("default"))) int simgpu_spy_launches(const char* kernel) {
  std::lock_guard lk(g_mu);
  auto it = g_launches->find(kernel);
  return it == g_launches->end() ? 0 : it->second;
}

extern "C" __attribute__((visibility("default"))) int simgpu_spy_lookups(const char* symbol) {
  std::lock_guard lk(g_mu);
  auto it = g_lookups->find(symbol);
  return it == g_lookups->end() ? 0 : it->second;
}

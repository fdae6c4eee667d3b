// Writing kernels for the simulated GPU runtime (tests only; no link dependency).
//
// A kernel is an exported host function `void name(void** args)`; pass its address to
// cudaLaunchKernel / cuLaunchKernel and it runs on the stream's worker thread with the
// kernelParams array. Export it (extern "C" + -rdynamic, which xtimer_add_sim_program sets)
// so cudaFuncGetName/cuFuncGetName can name it.
//
// The real driver copies kernel parameters at launch. The simulated one can only do so
// when it knows their sizes: declare them with SIMGPU_KERNEL_PARAMS. Without it the
// caller's kernelParams array (and what it points to) must stay valid until the kernel ran.
//
//   extern "C" SIMGPU_KERNEL void sleep_ms(void** args) { simgpu_sleep_ns(*(int*)args[0] * 1000000LL); }
//   SIMGPU_KERNEL_PARAMS(sleep_ms, sizeof(int));
//
// Events are stamped on a simulated device clock that does not count the host's wake-up
// latency; a kernel that sleeps with simgpu_sleep_ns lasts exactly that long on it, even on a
// busy machine (a plain sleep also counts its oversleep).
#pragma once
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SIMGPU_KERNEL __attribute__((visibility("default"), noinline, used))

#ifdef __cplusplus
#define SIMGPU_EXTERN_C extern "C"
#else
#define SIMGPU_EXTERN_C
#endif

// Parameter sizes of kernel `name`, in order (a zero-terminated table the driver looks up
// by the name "simgpu_params_<name>").
#define SIMGPU_KERNEL_PARAMS(name, ...) \
  SIMGPU_EXTERN_C __attribute__((visibility("default"), used)) const size_t simgpu_params_##name[] = {__VA_ARGS__, 0}
#define SIMGPU_KERNEL_NO_PARAMS(name) \
  SIMGPU_EXTERN_C __attribute__((visibility("default"), used)) const size_t simgpu_params_##name[] = {0}

// Sleeps `ns` of device time from inside a kernel (the simulated libcuda's
// simgpu_kernel_sleep_ns; a plain sleep when it is not loaded).
static inline void simgpu_sleep_ns(int64_t ns) {
  typedef void (*simgpu_sleep_fn)(int64_t);
  static simgpu_sleep_fn fn = (simgpu_sleep_fn)dlsym(RTLD_DEFAULT, "simgpu_kernel_sleep_ns");
  if (fn) {
    fn(ns);
  } else {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&ts, NULL);
  }
}

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
//   extern "C" SIMGPU_KERNEL void sleep_ms(void** args) { usleep(*(int*)args[0] * 1000); }
//   SIMGPU_KERNEL_PARAMS(sleep_ms, sizeof(int));
#pragma once
#include <stddef.h>

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

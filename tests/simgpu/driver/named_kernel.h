// Kernels known by name only: the device functions a real program registers with the runtime
// (`__cudaRegisterFunction`, one per `__global__` function in its fat binaries). The simulation
// has no device code to run, so each launch of one is a no-op on its stream that lasts a
// modelled time and carries the kernel's real (mangled) name to cuFuncGetName and CUPTI.
//
// A named kernel's handle is a CUfunction (and a CUkernel: the same pointer); a plain host
// function pointer keeps its meaning (a test kernel, run on the stream's worker).
//
// Modelled time of one launch of T threads (grid x block), on the device clock:
//   max(SIMGPU_KERNEL_FLOOR_US, T x SIMGPU_KERNEL_FLOPS_PER_THREAD / (SIMGPU_TFLOPS x 1e12 / s))
// stretched by the control file's gpu_factor (a slow GPU is slow in every kernel). A launch
// whose name matches the control file's `stuck_kernel` rule never completes (common/control.h).
#pragma once

#include <cstdint>
#include <string>

namespace simgpu::drv {

struct NamedKernel {
  uint32_t magic;
  std::string name;  // as registered: the mangled device name
};

// The named kernel behind a CUfunction/CUkernel, or nullptr for a host function pointer.
// Lock-free after the first launch of each handle is cached by the caller; takes a shared lock.
const NamedKernel* as_named_kernel(const void* f);

// Runs one launch of `k` with `threads` threads on the calling stream worker, from `start` on
// the device clock; returns its end: start + its modelled time, exactly (a worker that begins it
// late catches up, as with simgpu_kernel_sleep_ns; the device clock may lead real time by
// kDeviceLeadNs). A stuck launch never returns.
int64_t run_named_kernel(const NamedKernel& k, uint64_t threads, int64_t start);

constexpr uint32_t kNamedKernelMagic = 0x4b4e4d44;

}  // namespace simgpu::drv

// Simulation-only export of libcuda.so.1: the handle for the kernel called `name` (the same
// handle for the same name), created on first use; never freed. nullptr for a null name.
extern "C" void* simgpu_named_kernel(const char* name);

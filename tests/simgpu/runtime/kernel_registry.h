// The kernels and device variables a program registers with the runtime, as nvcc's generated
// code does at load time: each object's constructor calls __cudaRegisterFatBinary, then
// __cudaRegisterFunction once per __global__ function (host stub -> device name) and
// __cudaRegisterVar once per __device__/__constant__ variable. A `<<<...>>>` launch pushes its
// configuration, and the host stub pops it and calls __cudaLaunchKernel (nvcc 13) or
// cudaLaunchKernel (older code) with the stub's kernel.
//
// The simulation has no device code: a registered stub is launched as the driver's named
// kernel of its device name (driver/named_kernel.h), a no-op of modelled duration. A function
// pointer that was never registered keeps its simulated meaning: a host function run as the
// kernel (the test kernels of simgpu/kernel.h).
#pragma once

#include "runtime/runtime.h"

namespace simgpu::rt {

// What to pass to the driver's cuLaunchKernel for `f`: a registered host stub's named kernel,
// else `f` itself. Needs init(). Thread-safe (shared lock).
CUfunction launch_target(const void* f);

}  // namespace simgpu::rt

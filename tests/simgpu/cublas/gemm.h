// The simulated GEMM "kernel" shared by libcublas.so.13 and libcublasLt.so.13. Like the real
// libraries, the work is launched through the driver's cuLaunchKernel (reached via
// dlopen + cuGetProcAddress), so hooks on that path see cuBLAS kernels.
#pragma once
#include <cstdint>

#include "common/driver_api.h"

namespace simgpu::blas {

// The first word of a cuBLAS handle. A cublasHandle_t may be passed where a cublasLtHandle_t is
// expected, as with the real libraries (PyTorch does so): cuBLASLt accepts either.
constexpr uint32_t kCublasHandleMagic = 0x43424c53;

enum class Kernel { BF16, F16, F32, TF32, F64, I8, FP8 };

// Kernel family for the A/B data type and compute type (cudaDataType / cublasComputeType_t values).
Kernel kernel_for(int a_type, int compute_type, bool tf32_math);

// Whether the driver can be reached and has a device (cublasCreate/cublasLtCreate succeed).
bool driver_ready();

// Enqueues a kernel that takes 2*batch*m*n*k / (SIMGPU_TFLOPS * 1e12) seconds on `stream`.
// Returns the driver's result.
CUresult launch_gemm(Kernel k, int64_t m, int64_t n, int64_t kk, int64_t batch, CUstream stream);

}  // namespace simgpu::blas

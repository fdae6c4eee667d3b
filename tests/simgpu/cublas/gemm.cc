#include "cublas/gemm.h"

#include <library_types.h>
#include <cublas_api.h>

#include "common/simgpu_clock.h"
#include "common/simgpu_env.h"

// Host "kernels": exported so dladdr/cuFuncGetName name them, each with the parameter table
// (simgpu/kernel.h convention) that makes the driver copy the duration at launch.
namespace {
// Device-time sleep through the simulated driver (host wake-up latency is not counted).
void gemm_sleep(int64_t ns) {
  const simgpu::DriverApi* d = simgpu::driver_api();
  if (d && d->kernel_sleep_ns) d->kernel_sleep_ns(ns);
  else simgpu::sleep_until_ns(simgpu::now_ns() + ns);
}
}  // namespace

#define SIMGPU_GEMM_KERNEL(name)                                                       \
  extern "C" __attribute__((visibility("default"), noinline)) void name(void** args) { \
    gemm_sleep(*static_cast<int64_t*>(args[0]));                                       \
  }                                                                                    \
  extern "C" __attribute__((visibility("default"))) const size_t simgpu_params_##name[] = {sizeof(int64_t), 0};

SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_bf16)
SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_f16)
SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_f32)
SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_tf32)
SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_f64)
SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_i8)
SIMGPU_GEMM_KERNEL(simgpu_sm90_xmma_gemm_e4m3)

namespace simgpu::blas {

Kernel kernel_for(int a_type, int compute_type, bool tf32_math) {
  switch (a_type) {
    case CUDA_R_16BF: return Kernel::BF16;
    case CUDA_R_16F: return Kernel::F16;
    case CUDA_R_64F: return Kernel::F64;
    case CUDA_R_8I: return Kernel::I8;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: return Kernel::FP8;
    case CUDA_R_32F: return (tf32_math || compute_type == CUBLAS_COMPUTE_32F_FAST_TF32) ? Kernel::TF32 : Kernel::F32;
    default: return Kernel::F32;
  }
}

bool driver_ready() {
  const DriverApi* d = driver_api();
  if (!d || d->cuInit(0) != CUDA_SUCCESS) return false;
  int n = 0;
  return d->cuDeviceGetCount(&n) == CUDA_SUCCESS && n > 0;
}

CUresult launch_gemm(Kernel k, int64_t m, int64_t n, int64_t kk, int64_t batch, CUstream stream) {
  static const double tflops = [] {
    double t = env_double("SIMGPU_TFLOPS", 100.0);
    return t > 0 ? t : 100.0;
  }();
  const DriverApi* d = driver_api();
  if (!d) return CUDA_ERROR_NOT_INITIALIZED;
  void (*fn)(void**) = nullptr;
  switch (k) {
    case Kernel::BF16: fn = simgpu_sm90_xmma_gemm_bf16; break;
    case Kernel::F16: fn = simgpu_sm90_xmma_gemm_f16; break;
    case Kernel::F32: fn = simgpu_sm90_xmma_gemm_f32; break;
    case Kernel::TF32: fn = simgpu_sm90_xmma_gemm_tf32; break;
    case Kernel::F64: fn = simgpu_sm90_xmma_gemm_f64; break;
    case Kernel::I8: fn = simgpu_sm90_xmma_gemm_i8; break;
    case Kernel::FP8: fn = simgpu_sm90_xmma_gemm_e4m3; break;
  }
  const double flops = 2.0 * double(batch) * double(m) * double(n) * double(kk);
  int64_t ns = int64_t(flops / (tflops * 1e3));  // flops / (tflops * 1e12) s, in ns
  void* args[] = {&ns};
  // 128x128 tiles, batch in z: what a real launch of this size would look like.
  auto tiles = [](int64_t v) { return unsigned(v <= 0 ? 1 : (v + 127) / 128 > 65535 ? 65535 : (v + 127) / 128); };
  const unsigned gz = unsigned(batch < 1 ? 1 : batch > 65535 ? 65535 : batch);
  return d->cuLaunchKernel(reinterpret_cast<CUfunction>(fn), tiles(m), tiles(n), gz, 256, 1, 1, 0, stream, args,
                           nullptr);
}

}  // namespace simgpu::blas

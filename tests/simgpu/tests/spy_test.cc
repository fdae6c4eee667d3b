// The wiring the preloaded library depends on: the runtime, cuBLAS, cuBLASLt and NCCL all
// launch through a cuLaunchKernel they obtained with dlsym("cuGetProcAddress_v2"), so a
// dlsym hook (simgpu_spy, LD_PRELOADed by ctest) sees every kernel.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include "test_kernels.h"

extern "C" cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);

namespace {

int launches(const char* kernel) {
  static auto fn = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "simgpu_spy_launches"));
  return fn ? fn(kernel) : -1;
}

int lookups(const char* symbol) {
  static auto fn = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "simgpu_spy_lookups"));
  return fn ? fn(symbol) : -1;
}

}  // namespace

TEST(Spy, IsPreloaded) { ASSERT_GE(launches("x"), 0) << "run with LD_PRELOAD=libsimgpu_spy.so"; }

TEST(Spy, RuntimeLaunchesGoThroughTheDriverEntryPoint) {
  int x = 0;
  int* px = &x;
  int v = 1;
  void* args[] = {&px, &v};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_store, dim3(1), dim3(1), args, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel_ptsz((const void*)simgpu_test_store, dim3(1), dim3(1), args, 0, nullptr), cudaSuccess);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(1);
  ASSERT_EQ(cudaLaunchKernelExC(&cfg, (const void*)simgpu_test_store, args), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(launches("simgpu_test_store"), 3);
  EXPECT_GE(lookups("cuLaunchKernel"), 2) << "legacy and per-thread flavours";
  // cudaGetDriverEntryPoint hands out the same (hooked) pointer.
  void* fn = nullptr;
  ASSERT_EQ(cudaGetDriverEntryPoint("cuLaunchKernel", &fn, cudaEnableDefault, nullptr), cudaSuccess);
  ASSERT_EQ(reinterpret_cast<decltype(&cuLaunchKernel)>(fn)(reinterpret_cast<CUfunction>(simgpu_test_store), 1, 1, 1, 1,
                                                            1, 1, 0, nullptr, args, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(launches("simgpu_test_store"), 4);
}

TEST(Spy, CublasAndLtLaunchNamedKernelsThroughTheDriver) {
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 4096), cudaSuccess);
  const float one = 1, zero = 0;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, buf, CUDA_R_16BF, 64, buf, CUDA_R_16BF, 64,
                         &zero, buf, CUDA_R_16BF, 64, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, (float*)buf, 64, (float*)buf, 64, &zero,
                        (float*)buf, 64),
            CUBLAS_STATUS_SUCCESS);
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t d;
  ASSERT_EQ(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t l;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 64, 64, 64), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmul(lt, d, &one, buf, l, buf, l, &zero, buf, l, buf, l, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(launches("simgpu_sm90_xmma_gemm_bf16"), 1);
  EXPECT_EQ(launches("simgpu_sm90_xmma_gemm_f32"), 1);
  EXPECT_EQ(launches("simgpu_sm90_xmma_gemm_f16"), 1);
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(d);
  cublasLtDestroy(lt);
  cublasDestroy(h);
  cudaFree(buf);
}

TEST(Spy, NcclLaunchesItsKernelThroughTheDriver) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c;
  ASSERT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 4096), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, c, nullptr), ncclSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(launches("ncclDevKernel_AllReduce_RING_LL"), 1);
  ASSERT_EQ(ncclCommDestroy(c), ncclSuccess);
  cudaFree(buf);
}

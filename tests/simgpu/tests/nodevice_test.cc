// SIMGPU_DEVICES=0: a machine with a driver but no GPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

TEST(NoDevice, RuntimeReportsNoDevice) {
  int n = 7;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaErrorNoDevice);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNoDevice);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorNoDevice);
  cudaStream_t s;
  EXPECT_EQ(cudaStreamCreate(&s), cudaErrorNoDevice);
  EXPECT_EQ(cudaSetDevice(0), cudaErrorNoDevice);
  int v = 0;
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
}

TEST(NoDevice, DriverReportsNoDevice) {
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
  int n = 7;
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NO_DEVICE);
  CUdevice d;
  EXPECT_EQ(cuDeviceGet(&d, 0), CUDA_ERROR_NO_DEVICE);
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_ERROR_NO_DEVICE);
}

TEST(NoDevice, CublasCannotInitialise) {
  cublasHandle_t h = nullptr;
  EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtHandle_t lt = nullptr;
  EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(NoDevice, NcclCannotInitialise) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclUnhandledCudaError);
}

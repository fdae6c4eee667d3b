// Touches all five simulated libraries; used by check_linkage.py (ldd, symbol versions,
// no "no version information" warnings).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>

int main() {
  int v = 0;
  if (cuDriverGetVersion(&v) != CUDA_SUCCESS || v != 13000) return 1;
  void* p = nullptr;
  if (cudaMalloc(&p, 1024) != cudaSuccess) return 2;
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 3;
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 4;
  if (ncclGetVersion(&v) != ncclSuccess) return 5;
  ncclUniqueId id;
  ncclComm_t c;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&c, 1, id, 0) != ncclSuccess) return 6;
  if (ncclAllReduce(p, p, 256, ncclFloat32, ncclSum, c, nullptr) != ncclSuccess) return 7;
  if (cudaDeviceSynchronize() != cudaSuccess) return 8;
  ncclCommDestroy(c);
  cublasLtDestroy(lt);
  cublasDestroy(h);
  cudaFree(p);
  printf("simgpu smoke ok (nccl %d)\n", v);
  return 0;
}

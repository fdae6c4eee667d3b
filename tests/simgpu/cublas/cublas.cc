// libcublas.so.13: handles and the GEMM family. Results are not computed; each GEMM is a
// kernel whose duration follows its FLOPs (see gemm.h).
#include "cublas/gemm.h"

#include <cublas_v2.h>

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

struct cublasContext {
  static constexpr uint32_t kMagic = simgpu::blas::kCublasHandleMagic;
  uint32_t magic = kMagic;
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  void* workspace = nullptr;
  size_t workspace_size = 0;
};

namespace {

using simgpu::blas::Kernel;

bool valid(cublasHandle_t h) { return h && h->magic == cublasContext::kMagic; }

cublasStatus_t gemm(cublasHandle_t h, int64_t m, int64_t n, int64_t k, int64_t batch, Kernel kind) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to launch
  CUresult r = simgpu::blas::launch_gemm(kind, m, n, k, batch, reinterpret_cast<CUstream>(h->stream));
  return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

Kernel kind(cublasHandle_t h, cudaDataType a, cublasComputeType_t c) {
  return simgpu::blas::kernel_for(a, c, valid(h) && (h->math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH);
}

}  // namespace

SIMGPU_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  if (!simgpu::blas::driver_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int* v) {
  if (!v) return CUBLAS_STATUS_INVALID_VALUE;
  *v = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; break;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; break;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT size_t cublasGetCudartVersion() { return 13000; }

SIMGPU_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t* s) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  *s = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t* mode) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->atomics = mode;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t* mode) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->atomics;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* ws, size_t size) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (size && !ws) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = ws;
  h->workspace_size = size;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                          const void*, const void*, cudaDataType at, int, const void*, cudaDataType,
                                          int, const void*, void*, cudaDataType, int, cublasComputeType_t ct,
                                          cublasGemmAlgo_t) {
  return gemm(h, m, n, k, 1, kind(h, at, ct));
}

SIMGPU_EXPORT cublasStatus_t cublasGemmEx_64(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int64_t m,
                                             int64_t n, int64_t k, const void*, const void*, cudaDataType at, int64_t,
                                             const void*, cudaDataType, int64_t, const void*, void*, cudaDataType,
                                             int64_t, cublasComputeType_t ct, cublasGemmAlgo_t) {
  return gemm(h, m, n, k, 1, kind(h, at, ct));
}

SIMGPU_EXPORT cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m, int n,
                                                 int k, const void*, const void* const[], cudaDataType at, int,
                                                 const void* const[], cudaDataType, int, const void*, void* const[],
                                                 cudaDataType, int, int batch, cublasComputeType_t ct,
                                                 cublasGemmAlgo_t) {
  return gemm(h, m, n, k, batch, kind(h, at, ct));
}

SIMGPU_EXPORT cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int64_t m,
                                                    int64_t n, int64_t k, const void*, const void* const[],
                                                    cudaDataType at, int64_t, const void* const[], cudaDataType,
                                                    int64_t, const void*, void* const[], cudaDataType, int64_t,
                                                    int64_t batch, cublasComputeType_t ct, cublasGemmAlgo_t) {
  return gemm(h, m, n, k, batch, kind(h, at, ct));
}

SIMGPU_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m,
                                                        int n, int k, const void*, const void*, cudaDataType at, int,
                                                        long long, const void*, cudaDataType, int, long long,
                                                        const void*, void*, cudaDataType, int, long long, int batch,
                                                        cublasComputeType_t ct, cublasGemmAlgo_t) {
  return gemm(h, m, n, k, batch, kind(h, at, ct));
}

SIMGPU_EXPORT cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t h, cublasOperation_t, cublasOperation_t,
                                                           int64_t m, int64_t n, int64_t k, const void*, const void*,
                                                           cudaDataType at, int64_t, long long, const void*,
                                                           cudaDataType, int64_t, long long, const void*, void*,
                                                           cudaDataType, int64_t, long long, int64_t batch,
                                                           cublasComputeType_t ct, cublasGemmAlgo_t) {
  return gemm(h, m, n, k, batch, kind(h, at, ct));
}

SIMGPU_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                            const float*, const float*, int, const float*, int, const float*, float*,
                                            int) {
  return gemm(h, m, n, k, 1, kind(h, CUDA_R_32F, CUBLAS_COMPUTE_32F));
}

SIMGPU_EXPORT cublasStatus_t cublasSgemm_v2_64(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int64_t m,
                                               int64_t n, int64_t k, const float*, const float*, int64_t, const float*,
                                               int64_t, const float*, float*, int64_t) {
  return gemm(h, m, n, k, 1, kind(h, CUDA_R_32F, CUBLAS_COMPUTE_32F));
}

SIMGPU_EXPORT cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                            const double*, const double*, int, const double*, int, const double*,
                                            double*, int) {
  return gemm(h, m, n, k, 1, Kernel::F64);
}

SIMGPU_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m,
                                                       int n, int k, const float*, const float*, int, long long,
                                                       const float*, int, long long, const float*, float*, int,
                                                       long long, int batch) {
  return gemm(h, m, n, k, batch, kind(h, CUDA_R_32F, CUBLAS_COMPUTE_32F));
}

SIMGPU_EXPORT cublasStatus_t cublasSgemmStridedBatched_64(cublasHandle_t h, cublasOperation_t, cublasOperation_t,
                                                          int64_t m, int64_t n, int64_t k, const float*, const float*,
                                                          int64_t, long long, const float*, int64_t, long long,
                                                          const float*, float*, int64_t, long long, int64_t batch) {
  return gemm(h, m, n, k, batch, kind(h, CUDA_R_32F, CUBLAS_COMPUTE_32F));
}

SIMGPU_EXPORT cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                         const __half*, const __half*, int, const __half*, int, const __half*, __half*,
                                         int) {
  return gemm(h, m, n, k, 1, Kernel::F16);
}

SIMGPU_EXPORT cublasStatus_t cublasHgemm_64(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int64_t m,
                                            int64_t n, int64_t k, const __half*, const __half*, int64_t, const __half*,
                                            int64_t, const __half*, __half*, int64_t) {
  return gemm(h, m, n, k, 1, Kernel::F16);
}

SIMGPU_EXPORT cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m,
                                                       int n, int k, const __half*, const __half*, int, long long,
                                                       const __half*, int, long long, const __half*, __half*, int,
                                                       long long, int batch) {
  return gemm(h, m, n, k, batch, Kernel::F16);
}

SIMGPU_EXPORT const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}

SIMGPU_EXPORT const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

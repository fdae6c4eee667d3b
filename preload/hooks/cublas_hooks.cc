// cuBLAS and cuBLASLt matrix multiplications, timed on the handle's stream and classed by
// their shape (m, n, k, batch) so the summary can give TFLOPS = 2*m*n*k*batch / time.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "preload/base/real_function.h"
#include "preload/hooks/timed_call.h"

namespace xtimer {
namespace {

XTIMER_REAL(kCublas, cublasGetStream_v2);
XTIMER_REAL(kCublasLt, cublasLtMatmulDescGetAttribute);
XTIMER_REAL(kCublasLt, cublasLtMatrixLayoutGetAttribute);

template <typename Fn, typename... Args>
cublasStatus_t Gemm(RealFunction<Fn>& real, cudaStream_t stream_or_null, bool ask_handle, cublasHandle_t handle,
                    int64_t m, int64_t n, int64_t k, int64_t batch, int dtype, Args... args) {
  HookEntry<Fn> hook(real);
  Fn fn = hook.fn;
  Tracker* t = hook.tracker;
  if (fn == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (t == nullptr) return fn(args...);
  cudaStream_t stream = stream_or_null;
  if (ask_handle) {
    auto get_stream = real_cublasGetStream_v2.get();
    if (get_stream == nullptr || get_stream(handle, &stream) != CUBLAS_STATUS_SUCCESS) return fn(args...);
  }
  OpKey key;
  key.kind = OpKind::kMatmul;
  key.api = real.name();
  key.a = m;
  key.b = n;
  key.c = k;
  key.d = batch;
  key.e = dtype;
  uint32_t cls = t->Intern(key);
  OpPlace where{stream, gpu::Path::kRuntime, false, -1};
  return TimedCall<cublasStatus_t>(t, cls, where, OpRecord{}, [&] { return fn(args...); });
}

// cublas_api.h adds C++ overloads of these three, so their C signatures are spelled out.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const void*, const void*, cudaDataType, int, long long, const void*,
                                                  cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                  long long, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const void*, const void* const[], cudaDataType, int, const void* const[],
                                           cudaDataType, int, const void*, void* const[], cudaDataType, int, int,
                                           cublasComputeType_t, cublasGemmAlgo_t);
RealFunction<GemmExFn> real_cublasGemmEx("cublasGemmEx", Lib::kCublas);
RealFunction<GemmStridedBatchedExFn> real_cublasGemmStridedBatchedEx("cublasGemmStridedBatchedEx", Lib::kCublas);
RealFunction<GemmBatchedExFn> real_cublasGemmBatchedEx("cublasGemmBatchedEx", Lib::kCublas);
#define XTIMER_REAL_BLAS(fn) RealFunction<decltype(&::fn)> real_##fn(#fn, Lib::kCublas)
XTIMER_REAL_BLAS(cublasGemmEx_64);
XTIMER_REAL_BLAS(cublasGemmStridedBatchedEx_64);
XTIMER_REAL_BLAS(cublasGemmBatchedEx_64);
XTIMER_REAL_BLAS(cublasSgemm_v2);
XTIMER_REAL_BLAS(cublasSgemm_v2_64);
XTIMER_REAL_BLAS(cublasSgemmStridedBatched);
XTIMER_REAL_BLAS(cublasHgemm);
RealFunction<decltype(&::cublasLtMatmul)> real_cublasLtMatmul("cublasLtMatmul", Lib::kCublasLt);

// (m, n, k, batch) of a cublasLt matmul: D is m x n; op(A) is m x k.
struct LtShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int type = -1;
};

template <typename T>
bool LayoutAttr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T* out) {
  auto f = real_cublasLtMatrixLayoutGetAttribute.get();
  size_t written = 0;
  return f && l && f(l, attr, out, sizeof(T), &written) == CUBLAS_STATUS_SUCCESS && written == sizeof(T);
}

LtShape ShapeOf(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t d) {
  LtShape s;
  uint64_t rows = 0, cols = 0, a_rows = 0, a_cols = 0;
  int32_t batch = 1, trans_a = CUBLAS_OP_N;
  uint32_t type = 0;
  LayoutAttr(d, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows);
  LayoutAttr(d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols);
  LayoutAttr(a, CUBLASLT_MATRIX_LAYOUT_ROWS, &a_rows);
  LayoutAttr(a, CUBLASLT_MATRIX_LAYOUT_COLS, &a_cols);
  if (LayoutAttr(d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch) && batch > 0) s.batch = batch;
  if (LayoutAttr(a, CUBLASLT_MATRIX_LAYOUT_TYPE, &type)) s.type = static_cast<int>(type);
  if (auto f = real_cublasLtMatmulDescGetAttribute.get(); f && desc) {
    size_t written = 0;
    f(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a, &written);
  }
  s.m = static_cast<int64_t>(rows);
  s.n = static_cast<int64_t>(cols);
  s.k = static_cast<int64_t>(trans_a == CUBLAS_OP_N ? a_cols : a_rows);
  return s;
}

}  // namespace
}  // namespace xtimer

using namespace xtimer;

XTIMER_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          const void* B, cudaDataType bt, int ldb, const void* beta, void* C,
                                          cudaDataType ct, int ldc, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
  return Gemm(real_cublasGemmEx, nullptr, true, h, m, n, k, 1, at, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb,
              beta, C, ct, ldc, compute, algo);
}

XTIMER_EXPORT cublasStatus_t cublasGemmEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                                             int64_t n, int64_t k, const void* alpha, const void* A, cudaDataType at,
                                             int64_t lda, const void* B, cudaDataType bt, int64_t ldb, const void* beta,
                                             void* C, cudaDataType ct, int64_t ldc, cublasComputeType_t compute,
                                             cublasGemmAlgo_t algo) {
  return Gemm(real_cublasGemmEx_64, nullptr, true, h, m, n, k, 1, at, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb,
              beta, C, ct, ldc, compute, algo);
}

XTIMER_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                        int m, int n, int k, const void* alpha, const void* A,
                                                        cudaDataType at, int lda, long long sa, const void* B,
                                                        cudaDataType bt, int ldb, long long sb, const void* beta,
                                                        void* C, cudaDataType ct, int ldc, long long sc, int batch,
                                                        cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return Gemm(real_cublasGemmStridedBatchedEx, nullptr, true, h, m, n, k, batch, at, h, ta, tb, m, n, k, alpha, A, at,
              lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute, algo);
}

XTIMER_EXPORT cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                           int64_t m, int64_t n, int64_t k, const void* alpha,
                                                           const void* A, cudaDataType at, int64_t lda, long long sa,
                                                           const void* B, cudaDataType bt, int64_t ldb, long long sb,
                                                           const void* beta, void* C, cudaDataType ct, int64_t ldc,
                                                           long long sc, int64_t batch, cublasComputeType_t compute,
                                                           cublasGemmAlgo_t algo) {
  return Gemm(real_cublasGemmStridedBatchedEx_64, nullptr, true, h, m, n, k, batch, at, h, ta, tb, m, n, k, alpha, A,
              at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute, algo);
}

XTIMER_EXPORT cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* const A[],
                                                 cudaDataType at, int lda, const void* const B[], cudaDataType bt,
                                                 int ldb, const void* beta, void* const C[], cudaDataType ct, int ldc,
                                                 int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return Gemm(real_cublasGemmBatchedEx, nullptr, true, h, m, n, k, batch, at, h, ta, tb, m, n, k, alpha, A, at, lda, B,
              bt, ldb, beta, C, ct, ldc, batch, compute, algo);
}

XTIMER_EXPORT cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                    int64_t m, int64_t n, int64_t k, const void* alpha,
                                                    const void* const A[], cudaDataType at, int64_t lda,
                                                    const void* const B[], cudaDataType bt, int64_t ldb,
                                                    const void* beta, void* const C[], cudaDataType ct, int64_t ldc,
                                                    int64_t batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return Gemm(real_cublasGemmBatchedEx_64, nullptr, true, h, m, n, k, batch, at, h, ta, tb, m, n, k, alpha, A, at, lda,
              B, bt, ldb, beta, C, ct, ldc, batch, compute, algo);
}

XTIMER_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                            int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                                            const float* beta, float* C, int ldc) {
  return Gemm(real_cublasSgemm_v2, nullptr, true, h, m, n, k, 1, CUDA_R_32F, h, ta, tb, m, n, k, alpha, A, lda, B, ldb,
              beta, C, ldc);
}

XTIMER_EXPORT cublasStatus_t cublasSgemm_v2_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                                               int64_t n, int64_t k, const float* alpha, const float* A, int64_t lda,
                                               const float* B, int64_t ldb, const float* beta, float* C, int64_t ldc) {
  return Gemm(real_cublasSgemm_v2_64, nullptr, true, h, m, n, k, 1, CUDA_R_32F, h, ta, tb, m, n, k, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

XTIMER_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                       int m, int n, int k, const float* alpha, const float* A, int lda,
                                                       long long sa, const float* B, int ldb, long long sb,
                                                       const float* beta, float* C, int ldc, long long sc, int batch) {
  return Gemm(real_cublasSgemmStridedBatched, nullptr, true, h, m, n, k, batch, CUDA_R_32F, h, ta, tb, m, n, k, alpha,
              A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

XTIMER_EXPORT cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const __half* alpha, const __half* A, int lda, const __half* B, int ldb,
                                         const __half* beta, __half* C, int ldc) {
  return Gemm(real_cublasHgemm, nullptr, true, h, m, n, k, 1, CUDA_R_16F, h, ta, tb, m, n, k, alpha, A, lda, B, ldb,
              beta, C, ldc);
}

XTIMER_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha,
                                            const void* A, cublasLtMatrixLayout_t adesc, const void* B,
                                            cublasLtMatrixLayout_t bdesc, const void* beta, const void* C,
                                            cublasLtMatrixLayout_t cdesc, void* D, cublasLtMatrixLayout_t ddesc,
                                            const cublasLtMatmulAlgo_t* algo, void* workspace, size_t ws_size,
                                            cudaStream_t stream) {
  // The shape is read only when we will time it: nested or disabled calls skip the queries.
  LtShape s = (!InsideHook() && real_cublasLtMatmul.get() != nullptr) ? ShapeOf(desc, adesc, ddesc) : LtShape{};
  return Gemm(real_cublasLtMatmul, stream, false, nullptr, s.m, s.n, s.k, s.batch, s.type, h, desc, alpha, A, adesc, B,
              bdesc, beta, C, cdesc, D, ddesc, algo, workspace, ws_size, stream);
}

// cuBLAS / cuBLASLt on the simulation: GEMMs take 2*b*m*n*k / SIMGPU_TFLOPS on the handle's
// stream. Run with SIMGPU_TFLOPS=50 (set by ctest).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "test_kernels.h"

namespace {

double tflops() {
  const char* v = getenv("SIMGPU_TFLOPS");
  return v ? atof(v) : 100.0;
}

double expected_ms(double b, double m, double n, double k) { return 2.0 * b * m * n * k / (tflops() * 1e12) * 1e3; }

// Median over 7 runs of the device time of `op` on stream s (simtest::device_ms: queued behind a
// held kernel, so the host's scheduling adds nothing).
double timed_ms(cudaStream_t s, const std::function<void()>& op) {
  std::vector<double> runs;
  for (int i = 0; i < 7; ++i) runs.push_back(simtest::device_ms(s, op));
  return simtest::median(runs);
}

struct Fixture : ::testing::Test {
  cublasHandle_t h = nullptr;
  cudaStream_t s = nullptr;
  void* buf = nullptr;  // operands are never read; one small buffer stands in for all of them
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
  }
  void TearDown() override {
    cublasDestroy(h);
    cudaFree(buf);
    cudaStreamDestroy(s);
  }
};

using Cublas = Fixture;

}  // namespace

TEST_F(Cublas, GemmEx4096CubedTakesItsFlopsAtTheSimulatedRate) {
  ASSERT_GT(tflops(), 0);
  const float one = 1, zero = 0;
  const double ms = timed_ms(s, [&] {
    ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, 4096, 4096, 4096, &one, buf, CUDA_R_16BF, 4096, buf,
                           CUDA_R_16BF, 4096, &zero, buf, CUDA_R_16BF, 4096, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
  });
  const double want = expected_ms(1, 4096, 4096, 4096);
  printf("4096^3 bf16 GEMM at %.0f TFLOPS: %.4f ms (expected %.4f ms)\n", tflops(), ms, want);
  EXPECT_NEAR(ms, want, want * 0.02) << "at SIMGPU_TFLOPS=" << tflops();
}

TEST_F(Cublas, OtherGemmsUseMNKAndBatch) {
  const float one = 1, zero = 0;
  double ms = timed_ms(s, [&] {
    ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8192, 2048, 4096, &one, (float*)buf, 8192, (float*)buf, 4096,
                          &zero, (float*)buf, 8192),
              CUBLAS_STATUS_SUCCESS);
  });
  EXPECT_NEAR(ms, expected_ms(1, 8192, 2048, 4096), expected_ms(1, 8192, 2048, 4096) * 0.05);
  ms = timed_ms(s, [&] {
    ASSERT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2048, 1024, 4096, &one, buf, CUDA_R_16F, 4096, 0,
                                         buf, CUDA_R_16F, 4096, 0, &zero, buf, CUDA_R_16F, 2048, 0, 4,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
  });
  EXPECT_NEAR(ms, expected_ms(4, 2048, 1024, 4096), expected_ms(4, 2048, 1024, 4096) * 0.05);
  ms = timed_ms(s, [&] {
    ASSERT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 1024, 1024, 2048, &one, (float*)buf, 1024, 0,
                                        (float*)buf, 2048, 0, &zero, (float*)buf, 1024, 0, 16),
              CUBLAS_STATUS_SUCCESS);
  });
  EXPECT_NEAR(ms, expected_ms(16, 1024, 1024, 2048), expected_ms(16, 1024, 1024, 2048) * 0.05);
  std::vector<void*> arr(8, buf);
  ms = timed_ms(s, [&] {
    ASSERT_EQ(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2048, 2048, 1024, &one, arr.data(), CUDA_R_16BF, 2048,
                                  arr.data(), CUDA_R_16BF, 1024, &zero, arr.data(), CUDA_R_16BF, 2048, 8,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
  });
  EXPECT_NEAR(ms, expected_ms(8, 2048, 2048, 1024), expected_ms(8, 2048, 2048, 1024) * 0.05);
  ms = timed_ms(s, [&] {
    ASSERT_EQ(
        cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 4096, 4096, 2048, &one, buf, CUDA_R_32F, 4096, buf, CUDA_R_32F,
                        2048, &zero, buf, CUDA_R_32F, 4096, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
        CUBLAS_STATUS_SUCCESS);
  });
  EXPECT_NEAR(ms, expected_ms(1, 4096, 4096, 2048), expected_ms(1, 4096, 4096, 2048) * 0.05);
}

TEST_F(Cublas, WorkRunsOnTheHandlesStream) {
  std::atomic<int> flag{0};
  std::atomic<int>* f = &flag;
  void* args[] = {&f};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_wait_flag, dim3(1), dim3(1), args, 0, s), cudaSuccess);
  const float one = 1, zero = 0;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, (float*)buf, 64, (float*)buf, 64, &zero,
                        (float*)buf, 64),
            CUBLAS_STATUS_SUCCESS);
  cudaStream_t got = nullptr;
  ASSERT_EQ(cublasGetStream(h, &got), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  flag = 1;
  flag.notify_all();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

TEST_F(Cublas, HandleStateAndStatusStrings) {
  cublasMath_t m;
  ASSERT_EQ(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGetMathMode(h, &m), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(m, CUBLAS_TF32_TENSOR_OP_MATH);
  EXPECT_EQ(cublasSetWorkspace(h, buf, 1 << 20), CUBLAS_STATUS_SUCCESS);
  const float one = 1;
  EXPECT_EQ(cublasHgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 1, 1, (const __half*)&one, (__half*)buf, 1, (__half*)buf, 1,
                        (const __half*)&one, (__half*)buf, 1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "");
  EXPECT_EQ(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, (float*)buf, 1, (float*)buf, 1, &one,
                        (float*)buf, 1),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(CublasLt, MatmulTakesMNKFromLayoutsAndTransA) {
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N), CUBLAS_STATUS_SUCCESS);
  cublasOperation_t got;
  size_t written = 0;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &got, sizeof got, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, CUBLAS_OP_T);
  EXPECT_EQ(written, sizeof got);
  // op(A) = A^T is m x k = 2048 x 8192, so A is stored 8192 x 2048; D is m x n = 2048 x 4096.
  const uint64_t m = 2048, n = 4096, k = 8192;
  cublasLtMatrixLayout_t A, B, C, D;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&A, CUDA_R_16BF, k, m, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&B, CUDA_R_16BF, k, n, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&C, CUDA_R_16BF, m, n, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&D, CUDA_R_16BF, m, n, m), CUBLAS_STATUS_SUCCESS);
  uint64_t rows = 0;
  ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(A, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(rows, k);
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint64_t ws = 1 << 20;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t res[4];
  int count = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, A, B, C, D, pref, 4, res, &count), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(count, 1);
  EXPECT_EQ(res[0].state, CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  auto matmul = [&] {
    ASSERT_EQ(cublasLtMatmul(lt, desc, &one, buf, A, buf, B, &zero, buf, C, buf, D, &res[0].algo, nullptr, 0, s),
              CUBLAS_STATUS_SUCCESS);
  };
  double ms = timed_ms(s, matmul);
  EXPECT_NEAR(ms, expected_ms(1, m, n, k), expected_ms(1, m, n, k) * 0.05);

  // Batched through BATCH_COUNT on D.
  const int32_t batch = 3;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(D, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
            CUBLAS_STATUS_SUCCESS);
  ms = timed_ms(s, matmul);
  EXPECT_NEAR(ms, expected_ms(3, m, n, k), expected_ms(3, m, n, k) * 0.05);

  // A stack-initialised descriptor (cublasLtMatrixLayoutInit) works the same.
  cublasLtMatrixLayoutOpaque_t Aop;
  ASSERT_EQ(cublasLtMatrixLayoutInit(&Aop, CUDA_R_16BF, k, m, k), CUBLAS_STATUS_SUCCESS);
  int64_t ld = 0;
  ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(&Aop, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ld, int64_t(k));

  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {A, B, C, D}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  cudaFree(buf);
  cudaStreamDestroy(s);
}

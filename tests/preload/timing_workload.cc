// A CUDA program linked against the real toolkit (libcudart, libcuda, libcublas, libcublasLt,
// libnccl), run on the simulated runtime by the preload checks, with and without xtimer.
// Kernels are host functions (the simulated runtime's convention); they sleep for a known time.
//
//   timing_workload kernels                 2/5/20 ms kernels, driver and cuGetProcAddress launches
//   timing_workload gemm                    cublasGemmEx 4096^3 and a cublasLt matmul
//   timing_workload nccl RANK WORLD IDFILE  allreduce 64 MiB and a send/recv ring (one process per rank)
//   timing_workload train RANK WORLD IDFILE STEPS   a training-like loop (scripts/demo.sh)
//   timing_workload long MS                 one kernel that runs MS milliseconds, then a sync
//   timing_workload steady SECONDS          1,000 short launches/s next to 1.5 s kernels on a side stream
//   timing_workload fork                    fork and exec after CUDA is in use
//   timing_workload chain                   kernels back to back, after a matmul, and on an idle stream
// It prints what it computed; the output must be the same with and without xtimer.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <simgpu/kernel.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "check_call.h"

namespace {

// Device time: the simulated runtime stamps events on a device clock that a loaded host's
// wake-up latency does not stretch (tests/simgpu/include/simgpu/kernel.h).
void SleepMs(double ms) { simgpu_sleep_ns(static_cast<int64_t>(ms * 1e6)); }

}  // namespace

// Kernels: exported so the runtime can name them.
extern "C" {
__attribute__((visibility("default"))) void xt_sleep_2ms(void**) { SleepMs(2); }
__attribute__((visibility("default"))) void xt_sleep_5ms(void**) { SleepMs(5); }
__attribute__((visibility("default"))) void xt_sleep_20ms(void**) { SleepMs(20); }
__attribute__((visibility("default"))) void xt_driver_kernel(void**) { SleepMs(1); }
__attribute__((visibility("default"))) void xt_proc_address_kernel(void**) { SleepMs(3); }
__attribute__((visibility("default"))) void layer_norm_fwd(void**) { SleepMs(0.3); }
__attribute__((visibility("default"))) void gelu_bwd(void**) { SleepMs(0.4); }
__attribute__((visibility("default"))) void adamw_step(void**) { SleepMs(1.5); }
__attribute__((visibility("default"))) void xt_long_kernel(void** args) { SleepMs(*static_cast<int*>(args[0])); }
__attribute__((visibility("default"))) void xt_short_kernel(void**) { SleepMs(0.2); }
__attribute__((visibility("default"))) void xt_first_8ms(void**) { SleepMs(8); }
__attribute__((visibility("default"))) void xt_queued_4ms(void**) { SleepMs(4); }
__attribute__((visibility("default"))) void xt_after_gemm_2ms(void**) { SleepMs(2); }
__attribute__((visibility("default"))) void xt_idle_3ms(void**) { SleepMs(3); }
// Adds args[1] to the int at args[0]: something whose result the output can show.
__attribute__((visibility("default"))) void xt_add(void** args) {
  **static_cast<int**>(args[0]) += *static_cast<int*>(args[1]);
}
}

static int Kernels() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  dim3 one(1);
  for (int i = 0; i < 30; ++i) CHECK(cudaLaunchKernel((const void*)xt_sleep_2ms, one, one, nullptr, 0, stream));
  for (int i = 0; i < 20; ++i) CHECK(cudaLaunchKernel((const void*)xt_sleep_5ms, one, one, nullptr, 0, stream));
  for (int i = 0; i < 10; ++i) CHECK(cudaLaunchKernel((const void*)xt_sleep_20ms, one, one, nullptr, 0, stream));

  // Driver API, called directly.
  for (int i = 0; i < 5; ++i)
    CHECK(
        cuLaunchKernel(reinterpret_cast<CUfunction>(xt_driver_kernel), 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));

  // Driver API reached through cuGetProcAddress, as Triton and the CUDA runtime do.
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  CHECK(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  for (int i = 0; i < 7; ++i)
    CHECK(reinterpret_cast<LaunchFn>(fn)(reinterpret_cast<CUfunction>(xt_proc_address_kernel), 1, 1, 1, 1, 1, 1, 0,
                                         stream, nullptr, nullptr));

  // A computation whose result shows the hooks change nothing.
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof(int)));
  int zero = 0, total = 0;
  // The simulated runtime runs kernels later with the kernelParams array it was given (it
  // cannot copy parameters whose sizes it does not know): arguments must outlive the launch.
  static int values[101];
  static void* args[101][2];
  CHECK(cudaMemcpyAsync(dev, &zero, sizeof zero, cudaMemcpyHostToDevice, stream));
  for (int i = 1; i <= 100; ++i) {
    values[i] = i;
    args[i][0] = &dev;
    args[i][1] = &values[i];
    CHECK(cudaLaunchKernel((const void*)xt_add, one, one, args[i], 0, stream));
  }
  CHECK(cudaMemcpyAsync(&total, dev, sizeof total, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("kernels ok: sum 1..100 computed on the stream = %d\n", total);
  CHECK(cudaFree(dev));
  CHECK(cudaStreamDestroy(stream));
  return total == 5050 ? 0 : 1;
}

static int Gemm() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle));
  CHECK(cublasSetStream(handle, stream));
  const int n = 4096;
  void *a, *b, *c;
  CHECK(cudaMalloc(&a, 64));  // the simulated GEMM does not touch the data
  CHECK(cudaMalloc(&b, 64));
  CHECK(cudaMalloc(&c, 64));
  float alpha = 1, beta = 0;
  // The first GEMM starts the library's timing (its first launch call takes the host long, and a
  // loaded host longer): a smaller shape, a class of its own, outside the 4096^3 figures.
  CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 256, 256, 256, &alpha, a, CUDA_R_16BF, 256, b, CUDA_R_16BF, 256,
                     &beta, c, CUDA_R_16BF, 256, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < 20; ++i)
    CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta,
                       c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

  // cublasLt: D (8192 x 4096) = op(A) (8192 x 2048) * B, with A stored transposed (2048 x 8192).
  cublasLtHandle_t lt;
  CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t trans = CUBLAS_OP_T;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 2048, 8192, 2048));
  CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 2048, 4096, 2048));
  CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 8192, 4096, 8192));
  for (int i = 0; i < 10; ++i)
    CHECK(cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, c, ld, c, ld, nullptr, nullptr, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("gemm ok: 20 GemmEx %dx%dx%d, 10 cublasLtMatmul 8192x4096x2048\n", n, n, n);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  cublasDestroy(handle);
  return 0;
}

// Rank 0 writes the unique id to IDFILE (write then rename); the others wait for it.
static ncclUniqueId ShareId(int rank, const std::string& path) {
  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id));
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof id.internal);
    CHECK(std::rename(tmp.c_str(), path.c_str()));
    return id;
  }
  for (int i = 0; i < 3000; ++i) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id.internal, sizeof id.internal)) return id;
    usleep(10000);
  }
  std::fprintf(stderr, "rank %d: no unique id in %s after 30 s\n", rank, path.c_str());
  std::exit(1);
}

static int Nccl(int rank, int world, const std::string& id_file) {
  CHECK(cudaSetDevice(0));
  ncclUniqueId id = ShareId(rank, id_file);
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  const size_t count = 64u << 20 >> 2;  // 64 MiB of float32
  std::vector<float> host(count, static_cast<float>(rank + 1));
  float* buf;
  CHECK(cudaMalloc(&buf, count * sizeof(float)));
  const int iterations = 5;
  for (int it = 0; it < iterations; ++it) {
    CHECK(cudaMemcpy(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream));
    CHECK(cudaStreamSynchronize(stream));
  }
  CHECK(cudaMemcpy(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost));
  const float want = world * (world + 1) / 2.0f;
  bool ok = host.front() == want && host[count / 2] == want && host.back() == want;

  // A ring exchange in one group: send my rank to the next, receive from the previous.
  int *send, *recv, mine = rank, got = -1;
  CHECK(cudaMalloc(&send, 4096));
  CHECK(cudaMalloc(&recv, 4096));
  CHECK(cudaMemcpy(send, &mine, sizeof mine, cudaMemcpyHostToDevice));
  CHECK(ncclGroupStart());
  CHECK(ncclSend(send, 1024, ncclInt32, (rank + 1) % world, comm, stream));
  CHECK(ncclRecv(recv, 1024, ncclInt32, (rank + world - 1) % world, comm, stream));
  CHECK(ncclGroupEnd());
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpy(&got, recv, sizeof got, cudaMemcpyDeviceToHost));
  ok = ok && got == (rank + world - 1) % world;

  std::printf("nccl rank %d ok=%d: allreduce sum = %g (want %g), ring received %d\n", rank, ok, host.front(), want,
              got);
  CHECK(ncclCommDestroy(comm));
  return ok ? 0 : 1;
}

// A training step: forward and backward matmuls with elementwise kernels between them, a
// gradient allreduce, an optimizer kernel.
static int Train(int rank, int world, const std::string& id_file, int steps) {
  CHECK(cudaSetDevice(0));
  ncclUniqueId id = ShareId(rank, id_file);
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cublasHandle_t blas;
  CHECK(cublasCreate(&blas));
  CHECK(cublasSetStream(blas, stream));
  void *a, *b, *c;
  CHECK(cudaMalloc(&a, 64));
  CHECK(cudaMalloc(&b, 64));
  CHECK(cudaMalloc(&c, 64));
  const size_t grad_count = 32u << 20 >> 1;  // 32 MiB of bf16 gradients
  void* grads;
  CHECK(cudaMalloc(&grads, grad_count * 2));
  float alpha = 1, beta = 0;
  dim3 one(1);
  auto gemm = [&](int m, int n, int k) {
    CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, m, b, CUDA_R_16BF, k, &beta, c,
                       CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int step = 0; step < steps; ++step) {
    for (int layer = 0; layer < 4; ++layer) {
      CHECK(cudaLaunchKernel((const void*)layer_norm_fwd, one, one, nullptr, 0, stream));
      gemm(8192, 4096, 4096);   // QKV-like projection
      gemm(8192, 16384, 4096);  // MLP up
    }
    for (int layer = 0; layer < 4; ++layer) {
      CHECK(cudaLaunchKernel((const void*)gelu_bwd, one, one, nullptr, 0, stream));
      gemm(8192, 4096, 16384);  // MLP down, backward
    }
    CHECK(ncclAllReduce(grads, grads, grad_count, ncclBfloat16, ncclSum, comm, stream));
    CHECK(cudaLaunchKernel((const void*)adamw_step, one, one, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
  }
  std::printf("rank %d finished %d steps\n", rank, steps);
  CHECK(ncclCommDestroy(comm));
  cublasDestroy(blas);
  return 0;
}

static int Long(int ms) {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  static int duration;
  duration = ms;
  static void* args[] = {&duration};
  CHECK(cudaLaunchKernel((const void*)xt_long_kernel, dim3(1), dim3(1), args, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("long kernel of %d ms finished\n", ms);
  return 0;
}

// A healthy job: short kernels at about 1,000 launches/s on one stream, 1.5 s kernels back to
// back on another, the host syncing now and then. Nothing here is a hang under a 2 s timeout.
static int Steady(double seconds) {
  cudaStream_t main_stream, side;
  CHECK(cudaStreamCreate(&main_stream));
  CHECK(cudaStreamCreate(&side));
  static int long_ms = 1500;
  static void* long_args[] = {&long_ms};
  timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long launches = 0;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    if (elapsed >= seconds) break;
    if (cudaStreamQuery(side) == cudaSuccess)
      CHECK(cudaLaunchKernel((const void*)xt_long_kernel, dim3(1), dim3(1), long_args, 0, side));
    for (int i = 0; i < 100; ++i, ++launches)
      CHECK(cudaLaunchKernel((const void*)xt_short_kernel, dim3(1), dim3(1), nullptr, 0, main_stream));
    CHECK(cudaStreamSynchronize(main_stream));  // 100 x 0.2 ms: the host waits ~20 ms
    usleep(80000);                              // ~1,000 launches per second
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("steady: %ld launches in %.0f s\n", launches, seconds);
  return 0;
}

// Forks after CUDA is in use: one child exits at once, one runs a CUDA call (which may fail, as
// after fork on a GPU, but must not hang or crash), one execs a shell. The parent goes on.
static int Fork() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (int i = 0; i < 10; ++i) CHECK(cudaLaunchKernel((const void*)xt_sleep_2ms, dim3(1), dim3(1), nullptr, 0, stream));
  pid_t kids[3];
  kids[0] = fork();
  if (kids[0] == 0) std::exit(0);
  kids[1] = fork();
  if (kids[1] == 0) {
    cudaLaunchKernel((const void*)xt_sleep_2ms, dim3(1), dim3(1), nullptr, 0, nullptr);
    std::exit(0);
  }
  kids[2] = fork();
  if (kids[2] == 0) {
    execl("/bin/sh", "sh", "-c", "exit 0", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 10; ++i) CHECK(cudaLaunchKernel((const void*)xt_sleep_5ms, dim3(1), dim3(1), nullptr, 0, stream));
  int bad = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CHECK(cudaStreamSynchronize(stream));
  std::printf("fork: %d of 3 children failed\n", bad);
  return bad == 0 ? 0 : 1;
}

// What a kernel timed by its end event alone must get right (preload/one_event.h): a kernel
// queued behind another (starts when that one ends), one queued behind a matmul, and one
// launched on an idle stream (starts when launched). Prints the CLOCK_MONOTONIC times just before
// and just after each launch onto the idle stream ("idle_launch_us BEFORE AFTER"), to compare
// with the trace: the kernel was issued, and began on the simulated device, between the two.
static int Chain() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle));
  CHECK(cublasSetStream(handle, stream));
  void *a, *b, *c;
  CHECK(cudaMalloc(&a, 64));
  CHECK(cudaMalloc(&b, 64));
  CHECK(cudaMalloc(&c, 64));
  float alpha = 1, beta = 0;
  dim3 one(1);
  // The first launch starts the library (its event pool, its threads): not a launch to time.
  CHECK(cudaLaunchKernel((const void*)xt_short_kernel, one, one, nullptr, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  auto now_us = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
  };
  for (int i = 0; i < 5; ++i) {
    double before = now_us();
    CHECK(cudaLaunchKernel((const void*)xt_first_8ms, one, one, nullptr, 0, stream));
    std::printf("idle_launch_us %.1f %.1f\n", before, now_us());
    CHECK(cudaLaunchKernel((const void*)xt_queued_4ms, one, one, nullptr, 0, stream));
    CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1024, 1024, 1024, &alpha, a, CUDA_R_16BF, 1024, b, CUDA_R_16BF,
                       1024, &beta, c, CUDA_R_16BF, 1024, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CHECK(cudaLaunchKernel((const void*)xt_after_gemm_2ms, one, one, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    SleepMs(20);  // the stream stays idle
    before = now_us();
    CHECK(cudaLaunchKernel((const void*)xt_idle_3ms, one, one, nullptr, 0, stream));
    std::printf("idle_launch_us %.1f %.1f\n", before, now_us());
    CHECK(cudaStreamSynchronize(stream));
    SleepMs(5);
  }
  std::printf("chain ok\n");
  cublasDestroy(handle);
  CHECK(cudaStreamDestroy(stream));
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "kernels") return Kernels();
  if (mode == "gemm") return Gemm();
  if (mode == "nccl" && argc == 5) return Nccl(std::atoi(argv[2]), std::atoi(argv[3]), argv[4]);
  if (mode == "long" && argc == 3) return Long(std::atoi(argv[2]));
  if (mode == "steady" && argc == 3) return Steady(std::atof(argv[2]));
  if (mode == "fork") return Fork();
  if (mode == "chain") return Chain();
  if (mode == "train" && argc == 6) return Train(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], std::atoi(argv[5]));
  std::fprintf(stderr,
               "usage: timing_workload kernels | gemm | nccl RANK WORLD IDFILE | train RANK WORLD IDFILE STEPS\n");
  return 2;
}

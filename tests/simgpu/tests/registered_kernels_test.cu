// Kernels compiled by nvcc, as real PyTorch's are: registered by the program's constructor
// (__cudaRegisterFatBinary/Function/Var) and launched with <<<...>>> (push/pop of the launch
// configuration, then __cudaLaunchKernel from the host stub). On the simulation each launch is a
// no-op of modelled duration that carries the kernel's real name (driver/named_kernel.h).
#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

__global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

namespace demo {
template <typename T>
__global__ void scale(T* x, T a) {
  x[threadIdx.x] *= a;
}
template __global__ void scale<float>(float*, float);
}  // namespace demo

__device__ int table[4];

namespace {

// Modelled time (SIMGPU_TFLOPS=0.1 in the test's environment): 64 flops per thread at 0.1e12/s
// is 0.64 ns per thread, with a 3 us floor.
constexpr double kNsPerThread = 64 / 0.1e3;

// The device time of one launch, from an event pair around it. The stream is held by a host
// function until the pair and the launch are queued, then runs a 51 ms kernel, so the pair and
// the launch begin when that ends: the figure is the launch's own device time unless this thread
// stalls for 51 ms. (The host function alone would not do: its device end is early by as much as
// its worker picked it up late, and the launch could then begin at its own queuing.)
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
};

void CUDART_CB wait_gate(void* p) {
  auto* g = static_cast<Gate*>(p);
  std::unique_lock<std::mutex> lk(g->m);
  g->cv.wait(lk, [g] { return g->open; });
}

double launch_ms(cudaStream_t s, int blocks, int threads) {
  Gate gate;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaLaunchHostFunc(s, wait_gate, &gate);
  add_one<<<78125, 1024, 0, s>>>(nullptr, 0);  // 51 ms at 0.64 ns a thread
  cudaEventRecord(a, s);
  add_one<<<blocks, threads, 0, s>>>(nullptr, 0);
  cudaEventRecord(b, s);
  {
    std::lock_guard<std::mutex> lk(gate.m);
    gate.open = true;
  }
  gate.cv.notify_all();
  float ms = -1;
  if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) ms = -1;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

void write_control(const char* text) {
  const char* path = getenv("SIMGPU_CONTROL");
  ASSERT_NE(path, nullptr);
  std::string tmp = std::string(path) + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs(text, f);
  fclose(f);
  ASSERT_EQ(rename(tmp.c_str(), path), 0);
  usleep(120 * 1000);  // the simulation looks at the file every 50 ms at most
}

TEST(RegisteredKernels, LaunchWithTheirRealNamesAndComputeNothing) {
  float host[256];
  for (float& v : host) v = 5;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof host), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  add_one<<<1, 256>>>(d, 256);
  demo::scale<float><<<1, 256>>>(d, 2.0f);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[0], 5);  // values are not computed: the launch is a no-op

  const char* name = nullptr;
  ASSERT_EQ(cudaFuncGetName(&name, reinterpret_cast<const void*>(add_one)), cudaSuccess);
  EXPECT_STREQ(name, "_Z7add_onePfi");
  cudaKernel_t k = nullptr;
  ASSERT_EQ(cudaGetKernel(&k, demo::scale<float>), cudaSuccess);
  ASSERT_EQ(cuKernelGetName(&name, reinterpret_cast<CUkernel>(k)), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_ZN4demo5scaleIfEEvPT_S1_");
  cudaFree(d);
}

TEST(RegisteredKernels, AttributesAndOccupancyAnswerAsOnAGpu) {
  cudaFuncAttributes a{};
  ASSERT_EQ(cudaFuncGetAttributes(&a, add_one), cudaSuccess);
  EXPECT_EQ(a.maxThreadsPerBlock, 1024);
  int blocks = 0;
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, add_one, 256, 0), cudaSuccess);
  EXPECT_EQ(blocks, 8);
  int min_grid = 0, block = 0;
  ASSERT_EQ(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, add_one), cudaSuccess);
  EXPECT_GT(block, 0);
  EXPECT_LE(block, 1024);
}

TEST(RegisteredKernels, DeviceVariablesHoldWhatIsCopiedToThem) {
  const int in[4] = {1, 2, 3, 4};
  int out[4] = {};
  ASSERT_EQ(cudaMemcpyToSymbol(table, in, sizeof in), cudaSuccess);
  ASSERT_EQ(cudaMemcpyFromSymbol(out, table, sizeof out), cudaSuccess);
  EXPECT_EQ(out[3], 4);
  size_t size = 0;
  ASSERT_EQ(cudaGetSymbolSize(&size, table), cudaSuccess);
  EXPECT_EQ(size, sizeof in);
  EXPECT_EQ(cudaMemcpyToSymbol(table, in, sizeof in + 4), cudaErrorInvalidValue);
}

TEST(RegisteredKernels, TakeTimeProportionalToTheirSizeWithAFloor) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const double big = launch_ms(s, 4096, 256);  // 1,048,576 threads: 671 us
  EXPECT_NEAR(big, 4096 * 256 * kNsPerThread / 1e6, 0.01 * 4096 * 256 * kNsPerThread / 1e6);
  const double small = launch_ms(s, 1, 32);  // below the floor: exactly the floor
  EXPECT_NEAR(small, 0.003, 0.0003);
  cudaStreamDestroy(s);
}

TEST(RegisteredKernels, ASlowGpuIsSlowInEveryKernel) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  write_control("all gpu_factor=3\n");
  const double slow = launch_ms(s, 4096, 256);
  write_control("");
  const double healthy = launch_ms(s, 4096, 256);
  EXPECT_NEAR(slow / healthy, 3.0, 0.03);
  cudaStreamDestroy(s);
}

TEST(RegisteredKernels, TheChosenLaunchOfAStuckKernelNeverCompletes) {
  write_control("all stuck_kernel=demo::scale stuck_launch=2\n");
  cudaStream_t stuck, other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stuck, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t first, second;
  ASSERT_EQ(cudaEventCreate(&first), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&second), cudaSuccess);
  demo::scale<float><<<1, 32, 0, stuck>>>(nullptr, 1.0f);
  cudaEventRecord(first, stuck);
  add_one<<<1, 32, 0, stuck>>>(nullptr, 0);  // another name: not counted
  demo::scale<float><<<1, 32, 0, stuck>>>(nullptr, 1.0f);
  cudaEventRecord(second, stuck);
  ASSERT_EQ(cudaEventSynchronize(first), cudaSuccess);
  // Other streams go on; the second launch of demo::scale never ends.
  add_one<<<1, 32, 0, other>>>(nullptr, 0);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  usleep(300 * 1000);
  EXPECT_EQ(cudaEventQuery(second), cudaErrorNotReady);
  write_control("");
}

}  // namespace

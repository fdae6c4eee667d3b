// The simulated runtime + driver, used exactly as a program linked against the real toolkit.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cudaGetDriverEntryPoint is what old code calls
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "test_kernels.h"

using simtest::now_ns;

// Exported by libcudart.so.13 but only declared under CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);
extern "C" cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);

namespace {

void launch_sleep(double ms, cudaStream_t s) {
  int64_t ns = int64_t(ms * 1e6);
  void* args[] = {&ns};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_sleep, dim3(1), dim3(1), args, 0, s), cudaSuccess);
}

void launch_store(int* dst, int value, cudaStream_t s) {
  void* args[] = {&dst, &value};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_store, dim3(1), dim3(1), args, 0, s), cudaSuccess);
}

void launch_wait_flag(std::atomic<int>* flag, cudaStream_t s) {
  void* args[] = {&flag};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_wait_flag, dim3(1), dim3(1), args, 0, s), cudaSuccess);
}

void launch_increment(std::atomic<int>* c, cudaStream_t s) {
  void* args[] = {&c};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_increment, dim3(1), dim3(1), args, 0, s), cudaSuccess);
}

void launch_copy(int* src, int* dst, cudaStream_t s) {
  void* args[] = {&src, &dst};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_copy_int, dim3(1), dim3(1), args, 0, s), cudaSuccess);
}

void release(std::atomic<int>& flag) {
  flag.store(1);
  flag.notify_all();
}

void launch_barrier(std::atomic<int>* arrived, int n, cudaStream_t s) {
  void* args[] = {&arrived, &n};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_barrier, dim3(1), dim3(1), args, 0, s), cudaSuccess);
}

// Whether `n` barrier kernels (simgpu_test_barrier) arrived within `limit_s` (which only stops
// a hung test).
bool arrived_by(std::atomic<int>& arrived, int n, double limit_s = 30) {
  const int64_t until = now_ns() + int64_t(limit_s * 1e9);
  while (arrived.load() < n && now_ns() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return arrived.load() >= n;
}

// The same, then lets every barrier kernel go, so that the test fails instead of hanging.
bool all_arrived(std::atomic<int>& arrived, int n, double limit_s = 30) {
  const bool all = arrived_by(arrived, n, limit_s);
  arrived.store(1 << 20);
  arrived.notify_all();
  return all;
}

int load(int& x) { return std::atomic_ref<int>(x).load(); }

}  // namespace

TEST(Device, QueriesLookLikeOneGpu) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 1);
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_STREQ(p.name, "xtimer simulated GPU");
  EXPECT_EQ(p.major, 9);
  EXPECT_GT(p.totalGlobalMem, size_t(1) << 30);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(sms, p.multiProcessorCount);
  int v = 0;
  ASSERT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  ASSERT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  int dev = -1;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cudaSetDevice(3), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNotReady), "cudaErrorNotReady");
}

TEST(Events, SleepingKernelsAreTimedWithinFivePercent) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (double ms : {2.0, 5.0, 20.0}) {
    for (int i = 0; i < 7; ++i) {
      // Queued behind a held kernel (simtest::device_ms), and the device clock leaves out the
      // worker's waits for a CPU: every run is the kernel's device time, on a loaded host too.
      const double got = simtest::device_ms(s, [&] { launch_sleep(ms, s); });
      EXPECT_GE(got, ms - 0.01) << "sleep kernel of " << ms << " ms, run " << i;
      EXPECT_LE(got, ms * 1.05) << "sleep kernel of " << ms << " ms, run " << i;
    }
  }
  cudaStreamDestroy(s);
}

TEST(Events, AnIdleStreamsKernelStartsWhenQueued) {
  // On an idle stream an event pair around a kernel measures at least the kernel, and no more
  // than the host saw pass from before the first record to the end of the synchronisation.
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t a, b;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  for (double ms : {2.0, 20.0}) {
    const int64_t t0 = now_ns();
    ASSERT_EQ(cudaEventRecord(a, s), cudaSuccess);
    launch_sleep(ms, s);
    ASSERT_EQ(cudaEventRecord(b, s), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
    const double host_ms = (now_ns() - t0) / 1e6;
    float got = 0;
    ASSERT_EQ(cudaEventElapsedTime(&got, a, b), cudaSuccess);
    EXPECT_GE(got, ms - 0.01) << "sleep kernel of " << ms << " ms";
    EXPECT_LE(got, host_ms) << "sleep kernel of " << ms << " ms: the pair is inside the host's view of it";
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
}

TEST(Events, UnreachedMarkerIsNotReadyUntilTheStreamGetsThere) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t start, e;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  // A kernel that says it runs, then blocks until the host arrives too: the host holds it 50 ms
  // from a moment it is known to be running, so its device time is at least that, however late
  // the stream's worker started it.
  std::atomic<int> arrived{0};
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  launch_barrier(&arrived, 2, s);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_TRUE(arrived_by(arrived, 1)) << "the kernel never ran";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, e), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "NotReady is not an error";
  arrived.fetch_add(1);
  arrived.notify_all();
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, e), cudaSuccess);
  EXPECT_GE(ms, 50.0f - 0.01f);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  cudaEventDestroy(start);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

TEST(Events, TimingErrorsMatchTheRealRuntime) {
  cudaEvent_t never, notiming, a;
  ASSERT_EQ(cudaEventCreate(&never), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&notiming, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(never), cudaSuccess);  // never recorded counts as complete
  ASSERT_EQ(cudaEventRecord(a, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(notiming, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float ms;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, notiming), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, never, a), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaEventDestroy(never);
  cudaEventDestroy(notiming);
  cudaEventDestroy(a);
}

TEST(Streams, RunInIssueOrder) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) {
    std::vector<int>* v = &order;
    void* args[] = {&v, &i};
    if (i % 5 == 0) launch_sleep(2, s);
    ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_append, dim3(1), dim3(1), args, 0, s), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  cudaStreamDestroy(s);
}

TEST(Streams, WaitEventOrdersAcrossStreams) {
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  int x = 0, y = -1;
  launch_sleep(30, s1);
  launch_store(&x, 7, s1);
  ASSERT_EQ(cudaEventRecord(e, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, e, 0), cudaSuccess);
  launch_copy(&x, &y, s2);
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  EXPECT_EQ(load(y), 7);

  // Without the wait, s2 runs ahead of a blocked s1.
  std::atomic<int> flag{0};
  int z = 0, w = -1;
  launch_wait_flag(&flag, s1);
  launch_store(&z, 9, s1);
  launch_copy(&z, &w, s2);
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  EXPECT_EQ(load(w), 0);
  EXPECT_EQ(cudaStreamQuery(s1), cudaErrorNotReady);
  release(flag);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(load(z), 9);
  cudaEventDestroy(e);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

TEST(Streams, LegacyDefaultStreamSynchronisesWithBlockingStreams) {
  cudaStream_t blocking, nonblocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  // cudaMemcpy (legacy stream) waits for earlier work on a blocking stream...
  int* x = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0, sizeof(int)), cudaSuccess);
  launch_sleep(30, blocking);
  launch_store(x, 5, blocking);
  int host = -1;
  ASSERT_EQ(cudaMemcpy(&host, x, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, 5);
  // ...and work on a blocking stream waits for earlier legacy-stream work.
  std::atomic<int> flag{0};
  launch_wait_flag(&flag, 0);
  int y = 0;
  launch_store(&y, 1, blocking);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(cudaStreamQuery(blocking), cudaErrorNotReady);
  EXPECT_EQ(load(y), 0);
  // ...but a non-blocking stream does not.
  int z = 0;
  launch_store(&z, 1, nonblocking);
  ASSERT_EQ(cudaStreamSynchronize(nonblocking), cudaSuccess);
  EXPECT_EQ(load(z), 1);
  release(flag);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(load(y), 1);
  cudaFree(x);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

TEST(Streams, DeviceSynchronizeWaitsForEveryStream) {
  std::vector<cudaStream_t> streams(4);
  std::vector<int> done(4, 0);
  std::atomic<int> arrived{0};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking), cudaSuccess);
    launch_sleep(10 + 5 * i, streams[i]);
    launch_barrier(&arrived, 4, streams[i]);
    launch_store(&done[i], 1, streams[i]);
  }
  // They run concurrently: each stream's barrier waits for the other three to reach theirs.
  EXPECT_TRUE(all_arrived(arrived, 4)) << "streams that run one at a time never meet";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(load(done[i]), 1);
  for (auto s : streams) cudaStreamDestroy(s);
}

TEST(Streams, DestroyedStreamStillFinishesItsWork) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int x = 0;
  launch_sleep(20, s);
  launch_store(&x, 3, s);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(load(x), 3);
}

TEST(Streams, PerThreadDefaultStreamsAreIndependentWorkers) {
  // Each thread's stream sleeps, then waits at a barrier for the other's: both arrive only if the
  // two per-thread streams run at once.
  std::atomic<int> arrived{0};
  auto worker = [&arrived](double* elapsed, bool use_ptsz) {
    const int64_t t0 = now_ns();
    int64_t ns = 80'000'000;
    void* args[] = {&ns};
    std::atomic<int>* at = &arrived;
    int two = 2;
    void* barrier_args[] = {&at, &two};
    if (use_ptsz) {
      // What a program built with --default-stream per-thread calls: stream 0 means "mine".
      ASSERT_EQ(cudaLaunchKernel_ptsz((const void*)simgpu_test_sleep, dim3(1), dim3(1), args, 0, 0), cudaSuccess);
      ASSERT_EQ(cudaLaunchKernel_ptsz((const void*)simgpu_test_barrier, dim3(1), dim3(1), barrier_args, 0, 0),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize_ptsz(0), cudaSuccess);
    } else {
      ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_sleep, dim3(1), dim3(1), args, 0, cudaStreamPerThread),
                cudaSuccess);
      ASSERT_EQ(
          cudaLaunchKernel((const void*)simgpu_test_barrier, dim3(1), dim3(1), barrier_args, 0, cudaStreamPerThread),
          cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
    }
    *elapsed = (now_ns() - t0) / 1e6;
  };
  double a = 0, b = 0;
  std::thread t1(worker, &a, false), t2(worker, &b, true);
  EXPECT_TRUE(all_arrived(arrived, 2)) << "per-thread streams must run concurrently";
  t1.join();
  t2.join();
  EXPECT_GE(a, 79.0);
  EXPECT_GE(b, 79.0);
}

TEST(Launch, ParametersAreCopiedAtLaunch) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  int out[4] = {0, 0, 0, 0};
  launch_sleep(20, s);
  for (int i = 0; i < 4; ++i) launch_store(&out[i], 100 + i, s);  // each call's args die with it
  volatile char scribble[4096];
  memset(const_cast<char*>(scribble), 0x5a, sizeof scribble);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 100 + i);
  cudaStreamDestroy(s);
}

TEST(Launch, KernelNamesComeFromTheSymbolTable) {
  const char* name = nullptr;
  ASSERT_EQ(cudaFuncGetName(&name, (const void*)simgpu_test_sleep), cudaSuccess);
  EXPECT_STREQ(name, "simgpu_test_sleep");
  ASSERT_EQ(cuFuncGetName(&name, reinterpret_cast<CUfunction>(simgpu_test_store)), CUDA_SUCCESS);
  EXPECT_STREQ(name, "simgpu_test_store");
}

TEST(Launch, ExCooperativeHostFuncAndCallback) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::atomic<int> count{0};
  std::atomic<int>* c = &count;
  void* args[] = {&c};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(4);
  cfg.blockDim = dim3(128);
  cfg.stream = s;
  ASSERT_EQ(cudaLaunchKernelExC(&cfg, (const void*)simgpu_test_increment, args), cudaSuccess);
  ASSERT_EQ(cudaLaunchCooperativeKernel((const void*)simgpu_test_increment, dim3(2), dim3(32), args, 0, s),
            cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(
                s, [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(10); }, &count),
            cudaSuccess);
  ASSERT_EQ(cudaStreamAddCallback(
                s,
                [](cudaStream_t, cudaError_t st, void* p) {
                  static_cast<std::atomic<int>*>(p)->fetch_add(st == cudaSuccess ? 100 : 1000);
                },
                &count, 0),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(count.load(), 112);
  EXPECT_EQ(cudaLaunchKernel((const void*)simgpu_test_increment, dim3(0), dim3(1), args, 0, s),
            cudaErrorInvalidConfiguration);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

TEST(ProcAddress, DriverEntryPointsWork) {
  // The path the real runtime, Triton and NCCL take: dlopen + dlsym + cuGetProcAddress.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto gpa = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(lib, "cuGetProcAddress_v2"));
  ASSERT_NE(gpa, nullptr);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  ASSERT_EQ(gpa("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  ASSERT_NE(fn, nullptr);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  int x = 0;
  int* px = &x;
  int v = 42;
  void* args[] = {&px, &v};
  ASSERT_EQ(reinterpret_cast<decltype(&cuLaunchKernel)>(fn)(reinterpret_cast<CUfunction>(simgpu_test_store), 1, 1, 1, 1,
                                                            1, 1, 0, reinterpret_cast<CUstream>(s), args, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(x, 42);

  EXPECT_EQ(gpa("cuNoSuchFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);

  // Per-thread flag selects the _ptsz twin; base names map to the newest ABI.
  Dl_info info;
  ASSERT_EQ(gpa("cuStreamQuery", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st), CUDA_SUCCESS);
  ASSERT_TRUE(dladdr(fn, &info));
  EXPECT_STREQ(info.dli_sname, "cuStreamQuery_ptsz");
  ASSERT_EQ(gpa("cuMemAlloc", &fn, 13000, 0, &st), CUDA_SUCCESS);
  ASSERT_TRUE(dladdr(fn, &info));
  EXPECT_STREQ(info.dli_sname, "cuMemAlloc_v2");

  // The runtime's way in, which calls the same cuGetProcAddress.
  cudaDriverEntryPointQueryResult q;
  ASSERT_EQ(cudaGetDriverEntryPoint("cuLaunchKernel", &fn, cudaEnableDefault, &q), cudaSuccess);
  EXPECT_EQ(q, cudaDriverEntryPointSuccess);
  ASSERT_TRUE(dladdr(fn, &info));
  EXPECT_STREQ(info.dli_sname, "cuLaunchKernel");
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &fn, 12000, cudaEnablePerThreadDefaultStream, &q),
            cudaSuccess);
  ASSERT_TRUE(dladdr(fn, &info));
  EXPECT_STREQ(info.dli_sname, "cuLaunchKernelEx_ptsz");
  ASSERT_EQ(cudaGetDriverEntryPoint("cuBogus", &fn, cudaEnableDefault, &q), cudaSuccess);
  EXPECT_EQ(q, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);

  // A launch through cudaGetDriverEntryPoint's cuLaunchKernelEx.
  ASSERT_EQ(cudaGetDriverEntryPoint("cuLaunchKernelEx", &fn, cudaEnableDefault, &q), cudaSuccess);
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = reinterpret_cast<CUstream>(s);
  v = 43;
  ASSERT_EQ(reinterpret_cast<decltype(&cuLaunchKernelEx)>(fn)(&cfg, reinterpret_cast<CUfunction>(simgpu_test_store),
                                                              args, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(x, 43);
  cudaStreamDestroy(s);
}

TEST(Driver, ContextsAndErrors) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int n = 0;
  ASSERT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
  CUdevice d;
  ASSERT_EQ(cuDeviceGet(&d, 0), CUDA_SUCCESS);
  CUcontext ctx;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, d), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUcontext cur = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  CUdevice cd = -1;
  ASSERT_EQ(cuCtxGetDevice(&cd), CUDA_SUCCESS);
  EXPECT_EQ(cd, 0);
  int v = 0;
  ASSERT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13000);
  const char* s = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_NOT_READY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_NOT_READY");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_NO_DEVICE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "no CUDA-capable device is detected");
  CUstream st;
  ASSERT_EQ(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent a, b;
  ASSERT_EQ(cuEventCreate(&a, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&b, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  int64_t ns = 10'000'000;
  void* args[] = {&ns};
  const int64_t t0 = now_ns();
  ASSERT_EQ(cuEventRecord(a, st), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(simgpu_test_sleep), 1, 1, 1, 1, 1, 1, 0, st, args, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b, st), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(b), CUDA_SUCCESS);
  const double host_ms = (now_ns() - t0) / 1e6;
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  // The 10 ms kernel, in ms: no shorter than its sleep, no longer than the host saw it take.
  EXPECT_GE(ms, 10.0 - 0.01);
  EXPECT_LE(ms, host_ms);
  unsigned flags = 0;
  ASSERT_EQ(cuStreamGetFlags(st, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_STREAM_NON_BLOCKING));
  cuEventDestroy(a);
  cuEventDestroy(b);
  cuStreamDestroy(st);
  cuDevicePrimaryCtxRelease(d);
}

TEST(Memory, AllocCopySetAndPointerQueries) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  const size_t n = 1 << 20;
  char* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n), cudaSuccess);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, n);
  ASSERT_EQ(cudaMemset(d, 0xab, n), cudaSuccess);
  std::vector<char> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], char(0xab));
  EXPECT_EQ(h[n - 1], char(0xab));

  char* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n, cudaHostAllocDefault), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  launch_sleep(10, s);
  ASSERT_EQ(cudaMemsetAsync(d, 7, n, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pinned[n / 2], 7);

  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, d + 100), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, pinned), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  ASSERT_EQ(cudaHostRegister(h.data(), n, cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(h.data() + 10, 10, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data() + 5), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaHostUnregister(h.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(h.data()), cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();

  void* stream_ordered = nullptr;
  ASSERT_EQ(cudaMallocAsync(&stream_ordered, 4096, s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(stream_ordered, 1, 4096, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(stream_ordered, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  ASSERT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  cudaGetLastError();
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free1, free0);
  void* zero = reinterpret_cast<void*>(1);
  ASSERT_EQ(cudaMalloc(&zero, 0), cudaSuccess);
  EXPECT_EQ(zero, nullptr);
  void* huge = nullptr;
  EXPECT_EQ(cudaMalloc(&huge, total + 1), cudaErrorMemoryAllocation);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

// Pageable host memory, as CUDA treats it: an async copy from it may be followed at once by a
// reuse of the buffer (its bytes were staged), an async copy into it is done when the call returns.
TEST(Memory, AsyncCopiesOfPageableMemoryBehaveAsInCuda) {
  const size_t n = 1 << 16;
  char* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto src = std::make_unique<std::vector<char>>(n, char(5));
  launch_sleep(20, s);  // the copy waits behind it
  ASSERT_EQ(cudaMemcpyAsync(d, src->data(), n, cudaMemcpyHostToDevice, s), cudaSuccess);
  std::fill(src->begin(), src->end(), char(9));  // reused at once, then freed
  src.reset();
  std::vector<char> dst(n, 0);
  launch_sleep(20, s);
  ASSERT_EQ(cudaMemcpyAsync(dst.data(), d, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(dst[0], 5) << "the copy into pageable memory is done on return, with the staged bytes";
  EXPECT_EQ(dst[n - 1], 5);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(Graphs, CaptureRecordsAndLaunchReplays) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::atomic<int> count{0};
  int x = 0;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  for (int i = 0; i < 3; ++i) launch_increment(&count, s);
  launch_store(&x, 11, s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(count.load(), 0) << "captured work must not run";
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  cudaGraphExec_t x1;
  ASSERT_EQ(cudaGraphInstantiate(&x1, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(x1, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(x1, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(count.load(), 6);
  EXPECT_EQ(x, 11);
  ASSERT_EQ(cudaGraphExecDestroy(x1), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

TEST(Graphs, ForkJoinThroughEventsJoinsTheCapture) {
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t fork, join;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  std::atomic<int> count{0};
  ASSERT_EQ(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
  launch_increment(&count, s1);
  ASSERT_EQ(cudaEventRecord(fork, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s2, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  launch_increment(&count, s2);
  ASSERT_EQ(cudaEventRecord(join, s2), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s1, join, 0), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s1, &g), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(s2, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  EXPECT_EQ(count.load(), 0);
  cudaGraphExec_t x;
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&x, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(x, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(count.load(), 2);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// Registered as a separate ctest run with SIMGPU_DEVICES=2.
TEST(MultiDevice, DevicesHaveTheirOwnContextsAndMemory) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  const char* want = getenv("SIMGPU_DEVICES");
  if (!want || atoi(want) < 2) GTEST_SKIP() << "needs SIMGPU_DEVICES>=2";
  ASSERT_EQ(n, atoi(want));
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  int dev = -1;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 1);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.device, 1);
  std::thread([] {
    int d = -1;
    ASSERT_EQ(cudaGetDevice(&d), cudaSuccess);
    EXPECT_EQ(d, 0) << "the current device is per thread";
  }).join();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

// How code that does not link CUDA (the checkpoint helper, Python extensions) reaches it.
TEST(Dlopen, RuntimeBySonameWorks) {
  void* rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(rt, nullptr) << dlerror();
  auto malloc_fn = reinterpret_cast<decltype(&cudaMalloc)>(dlsym(rt, "cudaMalloc"));
  auto host_alloc = reinterpret_cast<decltype(&cudaHostAlloc)>(dlsym(rt, "cudaHostAlloc"));
  auto copy_async = reinterpret_cast<decltype(&cudaMemcpyAsync)>(dlsym(rt, "cudaMemcpyAsync"));
  auto sync = reinterpret_cast<decltype(&cudaStreamSynchronize)>(dlsym(rt, "cudaStreamSynchronize"));
  ASSERT_TRUE(malloc_fn && host_alloc && copy_async && sync);
  void* d = nullptr;
  char* h = nullptr;
  ASSERT_EQ(malloc_fn(&d, 64), cudaSuccess);
  ASSERT_EQ(host_alloc(reinterpret_cast<void**>(&h), 64, cudaHostAllocDefault), cudaSuccess);
  strcpy(h, "checkpoint");
  ASSERT_EQ(copy_async(d, h, 11, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(sync(nullptr), cudaSuccess);
  EXPECT_STREQ(static_cast<char*>(d), "checkpoint");
  cudaFree(d);
  cudaFreeHost(h);
  dlclose(rt);
}

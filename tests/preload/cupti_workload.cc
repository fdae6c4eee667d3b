// Kernels launched every way a program can, for the CUPTI backend's checks (check_cupti.py),
// linked against the real toolkit and run on the simulated runtime:
//   - through the runtime (cudaLaunchKernel)                         cupti_runtime_kernel 4 ms x 5
//   - through a cuLaunchKernelEx found with dlopen("libcuda.so.1") + dlsym, as Triton's
//     launcher does (the preload's hooks never see these)            cupti_triton_kernel  3 ms x 10
//   - through cuGetProcAddress("cuLaunchKernelEx")                   cupti_proc_kernel    2 ms x 7
//   - by replaying a captured CUDA graph 4 times                     cupti_graph_kernel   6 ms x 4
//   - an async copy and a memset
//
//   cupti_workload launches             the above
//   cupti_workload subscribe-first      takes CUPTI's subscriber slot first (as PyTorch's profiler
//                                       or Nsight would), then the above
//   cupti_workload profiler-later       the above, then profiles as torch.profiler's Kineto does
//                                       (subscribe, buffer callbacks, kernel records) while
//                                       launching cupti_runtime_kernel x 5 through the runtime and
//                                       cupti_triton_kernel x 10 through a dlsym'd driver, a
//                                       second thread launching cupti_thread_kernel meanwhile;
//                                       prints what its own records counted
// It prints what it computed; the output must be the same with and without xtimer.
//
// Kernels that outlast the hang timeout while the host thread does something else
// (check_stuck.py), each `host_ms` of host work after the launch, then a cudaStreamSynchronize:
//   cupti_workload stuck-dlsym KERNEL_MS HOST_MS         cupti_stuck_kernel through a dlsym'd
//                                                        cuLaunchKernelEx
//   cupti_workload stuck-graph KERNEL_MS HOST_MS [dlsym] a graph of a short kernel and
//                                                        cupti_stuck_kernel, replayed by
//                                                        cudaGraphLaunch (or a dlsym'd cuGraphLaunch)
// Each prints {"launched_at": CLOCK_REALTIME seconds} when the launch call has returned, and
// {"host_done_at": ...} when the host work ended, before the synchronisation.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <simgpu/kernel.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "check_call.h"

extern "C" {
__attribute__((visibility("default"))) void cupti_runtime_kernel(void**) { simgpu_sleep_ns(4000000); }
__attribute__((visibility("default"))) void cupti_triton_kernel(void**) { simgpu_sleep_ns(3000000); }
__attribute__((visibility("default"))) void cupti_proc_kernel(void**) { simgpu_sleep_ns(2000000); }
__attribute__((visibility("default"))) void cupti_graph_kernel(void** args) {
  simgpu_sleep_ns(6000000);
  ++**static_cast<int**>(args[0]);
}
__attribute__((visibility("default"))) void cupti_thread_kernel(void**) { simgpu_sleep_ns(200000); }
__attribute__((visibility("default"))) void cupti_stuck_kernel(void** args) {
  simgpu_sleep_ns(static_cast<int64_t>(*static_cast<int*>(args[0])) * 1000000);
}
}
SIMGPU_KERNEL_PARAMS(cupti_stuck_kernel, sizeof(int));

namespace {

using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

void LaunchEx(LaunchExFn fn, void* kernel, cudaStream_t stream, int times) {
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = reinterpret_cast<CUstream>(stream);
  for (int i = 0; i < times; ++i) CHECK(fn(&config, reinterpret_cast<CUfunction>(kernel), nullptr, nullptr));
}

int Launches() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (int i = 0; i < 5; ++i)
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_runtime_kernel), dim3(1), dim3(1), nullptr, 0, stream));

  // Triton: the driver opened by name, the launch function found with dlsym.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto triton_launch = driver ? reinterpret_cast<LaunchExFn>(dlsym(driver, "cuLaunchKernelEx")) : nullptr;
  if (!triton_launch) {
    std::fprintf(stderr, "no cuLaunchKernelEx in libcuda.so.1\n");
    return 1;
  }
  LaunchEx(triton_launch, reinterpret_cast<void*>(cupti_triton_kernel), stream, 10);

  void* proc = nullptr;
  CUdriverProcAddressQueryResult found;
  CHECK(cuGetProcAddress("cuLaunchKernelEx", &proc, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  LaunchEx(reinterpret_cast<LaunchExFn>(proc), reinterpret_cast<void*>(cupti_proc_kernel), stream, 7);

  // A graph of one kernel, captured once and replayed 4 times; it counts its runs on the device.
  int* runs = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&runs), sizeof(int)));
  CHECK(cudaMemsetAsync(runs, 0, sizeof(int), stream));
  static int* runs_arg;
  runs_arg = runs;
  static void* args[] = {&runs_arg};
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_graph_kernel), dim3(1), dim3(1), args, 0, stream));
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 4; ++i) CHECK(cudaGraphLaunch(exec, stream));

  int host_runs = 0;
  CHECK(cudaMemcpyAsync(&host_runs, runs, sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("graph kernel ran %d times\n", host_runs);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(runs));
  return 0;
}

void CUPTIAPI Ignore(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void* DriverSymbol(const char* name) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* fn = driver != nullptr ? dlsym(driver, name) : nullptr;
  if (fn == nullptr) {
    std::fprintf(stderr, "no %s in libcuda.so.1\n", name);
    std::exit(1);
  }
  return fn;
}

void PrintTime(const char* what) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  std::printf("{\"%s\": %.3f}\n", what, ts.tv_sec + ts.tv_nsec / 1e9);
  std::fflush(stdout);
}
void PrintLaunched() { PrintTime("launched_at"); }

// The host's own work while the GPU is stuck (a data loader, the next step's Python). A sleep
// to a deadline, resumed after the signals a stack dump sends (as Python's time.sleep is).
__attribute__((noinline)) void HostWork(int ms) {
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec += 1;
    until.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

int StuckDlsym(int kernel_ms, int host_ms) {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  // The program's first work goes through the runtime, as in any PyTorch program: xtimer starts
  // at the first CUDA call it hooks.
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_proc_kernel), dim3(1), dim3(1), nullptr, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  auto launch = reinterpret_cast<LaunchExFn>(DriverSymbol("cuLaunchKernelEx"));
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = reinterpret_cast<CUstream>(stream);
  void* args[] = {&kernel_ms};
  CHECK(launch(&config, reinterpret_cast<CUfunction>(cupti_stuck_kernel), args, nullptr));
  PrintLaunched();
  HostWork(host_ms);
  PrintTime("host_done_at");
  CHECK(cudaStreamSynchronize(stream));
  std::printf("stuck kernel done\n");
  return 0;
}

int StuckGraph(int kernel_ms, int host_ms, bool dlsym_launch) {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  static int ms;
  ms = kernel_ms;
  static void* stuck_args[] = {&ms};
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_proc_kernel), dim3(1), dim3(1), nullptr, 0, stream));
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_stuck_kernel), dim3(1), dim3(1), stuck_args, 0, stream));
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  if (dlsym_launch) {
    using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);
    auto launch = reinterpret_cast<GraphLaunchFn>(DriverSymbol("cuGraphLaunch"));
    CHECK(launch(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUstream>(stream)));
  } else {
    CHECK(cudaGraphLaunch(exec, stream));
  }
  PrintLaunched();
  HostWork(host_ms);
  PrintTime("host_done_at");
  CHECK(cudaStreamSynchronize(stream));
  std::printf("stuck graph done\n");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return 0;
}

// A profiler's records, by kernel name (as torch.profiler's trace would list them).
std::mutex g_profiled_mu;
std::map<std::string, int> g_profiled;

void CUPTIAPI ProfilerBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 16;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI ProfilerBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard lk(g_profiled_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      ++g_profiled[reinterpret_cast<CUpti_ActivityKernel10*>(rec)->name];
  free(buffer);
}

// The program's own work (xtimer in CUPTI mode), then a profiler comes, as Kineto does when
// torch.profiler starts mid-job, while another thread keeps launching: its calls must succeed and
// its records must hold the kernels launched while it profiles.
int ProfilerLater() {
  if (int r = Launches(); r != 0) return r;
  cudaStream_t side;
  CHECK(cudaStreamCreate(&side));
  std::atomic<bool> stop{false};
  std::thread launcher([&] {
    while (!stop.load()) {
      CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_thread_kernel), dim3(1), dim3(1), nullptr, 0, side));
      CHECK(cudaStreamSynchronize(side));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CUpti_SubscriberHandle subscriber;
  CHECK(cuptiSubscribe(&subscriber, Ignore, nullptr));
  CHECK(cuptiActivityRegisterCallbacks(ProfilerBufferRequested, ProfilerBufferCompleted));
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (int i = 0; i < 5; ++i)
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(cupti_runtime_kernel), dim3(1), dim3(1), nullptr, 0, stream));
  LaunchEx(reinterpret_cast<LaunchExFn>(DriverSymbol("cuLaunchKernelEx")), reinterpret_cast<void*>(cupti_triton_kernel),
           stream, 10);
  CHECK(cudaStreamSynchronize(stream));
  stop.store(true);
  launcher.join();
  CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CHECK(cuptiUnsubscribe(subscriber));
  std::lock_guard lk(g_profiled_mu);
  std::printf("profiler: cupti_runtime_kernel %d, cupti_triton_kernel %d, cupti_thread_kernel %s\n",
              g_profiled["cupti_runtime_kernel"], g_profiled["cupti_triton_kernel"],
              g_profiled["cupti_thread_kernel"] > 0 ? "seen" : "missing");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "launches") return Launches();
  if ((mode == "stuck-dlsym" || mode == "stuck-graph") && argc >= 4) {
    const int kernel_ms = std::atoi(argv[2]), host_ms = std::atoi(argv[3]);
    if (mode == "stuck-dlsym") return StuckDlsym(kernel_ms, host_ms);
    return StuckGraph(kernel_ms, host_ms, argc > 4 && std::string(argv[4]) == "dlsym");
  }
  if (mode == "profiler-later") return ProfilerLater();
  if (mode == "subscribe-first") {
    CUpti_SubscriberHandle subscriber;
    CHECK(cuptiSubscribe(&subscriber, Ignore, nullptr));
    int r = Launches();
    CHECK(cuptiUnsubscribe(subscriber));
    return r;
  }
  std::fprintf(stderr,
               "usage: cupti_workload launches|subscribe-first|profiler-later|stuck-dlsym KERNEL_MS HOST_MS|"
               "stuck-graph KERNEL_MS HOST_MS [dlsym]\n");
  return 2;
}

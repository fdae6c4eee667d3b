// The simulated libcupti.so.13, used as a tracer uses the real one: buffers through the
// registered callbacks, records of the CUDA 13 structs, correlation ids, one subscriber.
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_kernels.h"

namespace {

size_t g_buffer_bytes = 1 << 16;
std::mutex g_mu;
std::vector<std::vector<uint8_t>> g_done;  // copies of completed buffers' valid bytes
std::set<std::thread::id> g_completing_threads;

void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, g_buffer_bytes));
  *size = g_buffer_bytes;
  *max_records = 0;
}

void CUPTIAPI Completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard lk(g_mu);
  g_done.emplace_back(buffer, buffer + valid);
  g_completing_threads.insert(std::this_thread::get_id());
  free(buffer);
}

struct Records {
  std::vector<CUpti_ActivityKernel10> kernels;
  std::vector<CUpti_ActivityMemcpy6> copies;
  std::vector<CUpti_ActivityMemset4> memsets;
  std::vector<CUpti_ActivityExternalCorrelation> external;
};

// Flushes and decodes everything delivered so far.
Records Collect() {
  EXPECT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  std::vector<std::vector<uint8_t>> done;
  {
    std::lock_guard lk(g_mu);
    done.swap(g_done);
  }
  Records r;
  for (auto& b : done) {
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(b.data(), b.size(), &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
          r.kernels.push_back(*reinterpret_cast<CUpti_ActivityKernel10*>(rec));
          break;
        case CUPTI_ACTIVITY_KIND_MEMCPY: r.copies.push_back(*reinterpret_cast<CUpti_ActivityMemcpy6*>(rec)); break;
        case CUPTI_ACTIVITY_KIND_MEMSET: r.memsets.push_back(*reinterpret_cast<CUpti_ActivityMemset4*>(rec)); break;
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
          r.external.push_back(*reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec));
          break;
        default: ADD_FAILURE() << "unexpected record kind " << rec->kind;
      }
    }
  }
  return r;
}

class Cupti : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    ASSERT_EQ(cuptiActivityRegisterCallbacks(Requested, Completed), CUPTI_SUCCESS);
    for (auto k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                   CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})
      ASSERT_EQ(cuptiActivityEnable(k), CUPTI_SUCCESS);
    // The first kernel of a process pays for binding simgpu_sleep_ns and the first record's
    // buffer: warm up once so the timed kernels below measure only themselves.
    int64_t ns = 1000;
    void* args[] = {&ns};
    ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_sleep, dim3(1), dim3(1), args, 0, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    Collect();  // start empty
  }
  void TearDown() override { cudaStreamDestroy(stream_); }
  void Sleep(double ms) {
    int64_t ns = int64_t(ms * 1e6);
    void* args[] = {&ns};
    ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_sleep, dim3(1), dim3(1), args, 0, stream_), cudaSuccess);
  }
  cudaStream_t stream_{};
};

TEST_F(Cupti, KernelRecordsCarryDeviceClockTimesStreamAndName) {
  // Event pairs around each kernel read the same device clock: each record must lie within its pair.
  cudaEvent_t ev[4];
  for (auto& e : ev) ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev[0], stream_), cudaSuccess);
  Sleep(3);
  ASSERT_EQ(cudaEventRecord(ev[1], stream_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev[2], stream_), cudaSuccess);
  Sleep(5);
  ASSERT_EQ(cudaEventRecord(ev[3], stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  Records r = Collect();
  ASSERT_EQ(r.kernels.size(), 2u);
  unsigned long long stream_id = 0;
  ASSERT_EQ(cudaStreamGetId(stream_, &stream_id), cudaSuccess);
  const double want[] = {3, 5};
  for (int i = 0; i < 2; ++i) {
    const auto& k = r.kernels[i];
    EXPECT_STREQ(k.name, "simgpu_test_sleep");
    EXPECT_EQ(k.streamId, stream_id);
    EXPECT_EQ(k.deviceId, 0u);
    float event_ms = 0;
    ASSERT_EQ(cudaEventElapsedTime(&event_ms, ev[2 * i], ev[2 * i + 1]), cudaSuccess);
    const double record_ms = (k.end - k.start) / 1e6;
    // The pair also spans the host's launch gap before the kernel: the record lies inside it.
    EXPECT_LE(record_ms, event_ms + 0.001) << "the record and the event pair read one device clock";
    EXPECT_GE(record_ms, want[i]) << "a kernel lasts at least what it slept";
  }
  for (auto& e : ev) cudaEventDestroy(e);
  EXPECT_GE(r.kernels[1].start, r.kernels[0].end) << "one stream runs in order";
  EXPECT_LT(r.kernels[0].correlationId, r.kernels[1].correlationId);
  uint64_t now = 0;
  ASSERT_EQ(cuptiGetTimestamp(&now), CUPTI_SUCCESS);
  EXPECT_GE(now, r.kernels[1].end) << "cuptiGetTimestamp is the device clock";
}

TEST_F(Cupti, GraphReplaysGiveOneRecordPerKernelWithTheLaunchCorrelation) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  Sleep(1);
  Sleep(2);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  Collect();  // nothing ran during capture
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  Records r = Collect();
  ASSERT_EQ(r.kernels.size(), 6u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.kernels[2 * i].correlationId, r.kernels[2 * i + 1].correlationId) << "same graph launch";
    EXPECT_NE(r.kernels[2 * i].graphId, 0u);
    EXPECT_GE((r.kernels[2 * i + 1].end - r.kernels[2 * i + 1].start) / 1e6, 2.0) << "the 2 ms kernel";
  }
  EXPECT_NE(r.kernels[0].correlationId, r.kernels[2].correlationId) << "each launch its own id";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(Cupti, CopiesAndMemsetsHaveKindBytesAndAsyncFlag) {
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 4096), cudaSuccess);
  std::vector<char> host(4096, 1);
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), 4096, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dev, 7, 1024, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, 2048, cudaMemcpyDeviceToHost), cudaSuccess);
  Records r = Collect();
  ASSERT_EQ(r.copies.size(), 2u);
  EXPECT_EQ(r.copies[0].copyKind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
  EXPECT_EQ(r.copies[0].bytes, 4096u);
  EXPECT_TRUE(r.copies[0].flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC);
  EXPECT_EQ(r.copies[1].copyKind, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
  EXPECT_FALSE(r.copies[1].flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) << "cudaMemcpy is synchronous";
  ASSERT_EQ(r.memsets.size(), 1u);
  EXPECT_EQ(r.memsets[0].bytes, 1024u);
  EXPECT_EQ(r.memsets[0].value, 7u);
  cudaFree(dev);
}

TEST_F(Cupti, ExternalCorrelationMarksTheKernelsLaunchedWhileItIsPushed) {
  // As on the real CUPTI, external correlation records come with API records only.
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 7), CUPTI_SUCCESS);
  Sleep(0.1);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(Collect().external.empty()) << "no API record enabled: no external correlation record";
  ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, nullptr), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 1), CUPTI_SUCCESS);
  Sleep(0.1);
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 42), CUPTI_SUCCESS);
  Sleep(0.1);
  uint64_t last = 0;
  ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &last), CUPTI_SUCCESS);
  EXPECT_EQ(last, 42u);
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &last),
            CUPTI_ERROR_QUEUE_EMPTY);
  Sleep(0.1);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  Records r = Collect();
  ASSERT_EQ(r.kernels.size(), 3u);
  ASSERT_EQ(r.external.size(), 1u);
  EXPECT_EQ(r.external[0].externalKind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
  EXPECT_EQ(r.external[0].externalId, 42u);
  EXPECT_EQ(r.external[0].correlationId, r.kernels[1].correlationId) << "only the middle launch";
  ASSERT_EQ(cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 0), CUPTI_SUCCESS);
}

TEST_F(Cupti, FullBuffersAreCompletedFromCuptisOwnThreadWithoutAFlush) {
  const size_t saved = g_buffer_bytes;
  g_buffer_bytes = 4 * sizeof(CUpti_ActivityKernel10);  // 4 records per buffer
  Collect();                                            // the next buffer is a small one
  {
    std::lock_guard lk(g_mu);
    g_completing_threads.clear();  // earlier flushes completed on this thread
  }
  for (int i = 0; i < 20; ++i) Sleep(0.05);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  bool delivered = false;
  for (int i = 0; i < 200 && !delivered; ++i) {
    {
      std::lock_guard lk(g_mu);
      delivered = g_done.size() >= 4;
    }
    if (!delivered) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(delivered) << "buffers delivered before any flush";
  {
    std::lock_guard lk(g_mu);
    EXPECT_EQ(g_completing_threads.count(std::this_thread::get_id()), 0u) << "not on the test's thread";
  }
  Records r = Collect();
  EXPECT_EQ(r.kernels.size(), 20u) << "nothing lost across buffers";
  g_buffer_bytes = saved;
}

// What the API callbacks reported, decoded with CUPTI's own generated parameter structs.
struct ApiSeen {
  CUpti_CallbackDomain domain = CUPTI_CB_DOMAIN_INVALID;
  CUpti_CallbackId cbid = 0;
  bool exit = false;
  uint32_t correlation = 0;
  const void* func = nullptr;  // kernel or executable graph
  void* stream = nullptr;
  std::string symbol;
  int status = -1;            // exit only
  uint64_t data_at_exit = 0;  // *correlationData at the exit (the entry wrote its correlation id)
};
std::vector<ApiSeen> g_api;

void CUPTIAPI OnApi(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  auto* cb = static_cast<const CUpti_CallbackData*>(data);
  ApiSeen a;
  a.domain = domain;
  a.cbid = cbid;
  a.exit = cb->callbackSite == CUPTI_API_EXIT;
  a.correlation = cb->correlationId;
  if (cb->symbolName) a.symbol = cb->symbolName;
  if (!a.exit) *cb->correlationData = cb->correlationId;
  if (a.exit) {
    a.data_at_exit = *cb->correlationData;
    a.status = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? int(*static_cast<cudaError_t*>(cb->functionReturnValue))
                                                     : int(*static_cast<CUresult*>(cb->functionReturnValue));
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
    auto* p = static_cast<const cudaLaunchKernel_v7000_params*>(cb->functionParams);
    a.func = p->func;
    a.stream = p->stream;
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000) {
    auto* p = static_cast<const cudaGraphLaunch_v10000_params*>(cb->functionParams);
    a.func = p->graphExec;
    a.stream = p->stream;
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050) {
    a.stream = static_cast<const cudaStreamDestroy_v5050_params*>(cb->functionParams)->stream;
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
    auto* p = static_cast<const cuLaunchKernel_params*>(cb->functionParams);
    a.func = p->f;
    a.stream = p->hStream;
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx) {
    auto* p = static_cast<const cuLaunchKernelEx_params*>(cb->functionParams);
    a.func = p->f;
    a.stream = p->config->hStream;
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch) {
    auto* p = static_cast<const cuGraphLaunch_params*>(cb->functionParams);
    a.func = p->hGraph;
    a.stream = p->hStream;
  }
  std::lock_guard lk(g_mu);
  g_api.push_back(a);
}

std::vector<ApiSeen> TakeApi() {
  std::lock_guard lk(g_mu);
  std::vector<ApiSeen> out;
  out.swap(g_api);
  return out;
}

TEST_F(Cupti, ApiCallbacksReportLaunchesWithTheCorrelationTheirKernelsCarry) {
  CUpti_SubscriberHandle sub;
  ASSERT_EQ(cuptiSubscribe(&sub, OnApi, nullptr), CUPTI_SUCCESS);
  const std::pair<CUpti_CallbackDomain, CUpti_CallbackId> enabled[] = {
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch}};
  for (auto [domain, cbid] : enabled) ASSERT_EQ(cuptiEnableCallback(1, sub, domain, cbid), CUPTI_SUCCESS);

  // The runtime: its callback, with the driver's nested inside it, one correlation id.
  Sleep(0.1);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  std::vector<ApiSeen> a = TakeApi();
  ASSERT_EQ(a.size(), 4u);
  EXPECT_TRUE(a[0].domain == CUPTI_CB_DOMAIN_RUNTIME_API && !a[0].exit && a[1].domain == CUPTI_CB_DOMAIN_DRIVER_API &&
              !a[1].exit && a[2].domain == CUPTI_CB_DOMAIN_DRIVER_API && a[2].exit &&
              a[3].domain == CUPTI_CB_DOMAIN_RUNTIME_API && a[3].exit)
      << "runtime entry, driver entry, driver exit, runtime exit";
  for (const ApiSeen& x : a) {
    EXPECT_EQ(x.correlation, a[0].correlation);
    EXPECT_EQ(x.func, reinterpret_cast<const void*>(simgpu_test_sleep));
    EXPECT_EQ(x.stream, stream_);
    EXPECT_EQ(x.symbol, "simgpu_test_sleep");
    if (x.exit) {
      EXPECT_EQ(x.status, 0);
      EXPECT_EQ(x.data_at_exit, x.correlation) << "correlationData is shared by entry and exit";
    }
  }
  Records r = Collect();
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].correlationId, a[0].correlation) << "the kernel's record carries the launch's id";

  // A dlsym'd cuLaunchKernelEx: the driver's callback alone.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto launch_ex = reinterpret_cast<decltype(&cuLaunchKernelEx)>(dlsym(driver, "cuLaunchKernelEx"));
  ASSERT_NE(launch_ex, nullptr);
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = reinterpret_cast<CUstream>(stream_);
  int64_t ns = 100000;
  void* args[] = {&ns};
  ASSERT_EQ(launch_ex(&config, reinterpret_cast<CUfunction>(simgpu_test_sleep), args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  a = TakeApi();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].cbid, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx);
  EXPECT_EQ(a[0].stream, stream_);
  r = Collect();
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.kernels[0].correlationId, a[0].correlation);

  // A graph replay: its kernels carry the graph launch's id.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  Sleep(0.1);
  Sleep(0.1);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  TakeApi();  // the captured launches
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  a = TakeApi();
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000);
  EXPECT_EQ(a[1].cbid, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch);
  EXPECT_EQ(a[0].func, reinterpret_cast<const void*>(exec));
  EXPECT_EQ(a[1].func, reinterpret_cast<const void*>(exec));
  EXPECT_EQ(a[1].stream, stream_);
  r = Collect();
  ASSERT_EQ(r.kernels.size(), 2u);
  for (const auto& k : r.kernels) EXPECT_EQ(k.correlationId, a[0].correlation);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // A stream destroy; then nothing once disabled.
  cudaStream_t doomed;
  ASSERT_EQ(cudaStreamCreate(&doomed), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(doomed), cudaSuccess);
  a = TakeApi();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].cbid, CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050);
  EXPECT_EQ(a[0].stream, doomed);
  for (auto [domain, cbid] : enabled) ASSERT_EQ(cuptiEnableCallback(0, sub, domain, cbid), CUPTI_SUCCESS);
  Sleep(0.1);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(TakeApi().empty()) << "disabled callbacks are not called";
  Collect();
  ASSERT_EQ(cuptiUnsubscribe(sub), CUPTI_SUCCESS);
}

TEST(CuptiSubscriber, OnlyOneSubscriberAtATime) {
  CUpti_SubscriberHandle first, second;
  ASSERT_EQ(cuptiSubscribe(&first, nullptr, nullptr), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiSubscribe(&second, nullptr, nullptr), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_EQ(cuptiEnableDomain(1, first, CUPTI_CB_DOMAIN_DRIVER_API), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiUnsubscribe(first), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiSubscribe(&second, nullptr, nullptr), CUPTI_SUCCESS) << "the slot is free again";
  EXPECT_EQ(cuptiUnsubscribe(second), CUPTI_SUCCESS);
}

// Clients one after the other, as a tracer that hands CUPTI to a profiler (Kineto) does. The
// Activity API is the process's: records go to the buffer callbacks registered last, and a
// kind stays enabled until someone disables it. These run last: cuptiFinalize detaches all.
std::atomic<int> g_kernels_a{0}, g_kernels_b{0};

int CountKernels(uint8_t* buffer, size_t valid) {
  int n = 0;
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    n += rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  return n;
}
void CUPTIAPI CompletedA(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  g_kernels_a += CountKernels(buffer, valid);
  free(buffer);
}
void CUPTIAPI CompletedB(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  g_kernels_b += CountKernels(buffer, valid);
  free(buffer);
}

void LaunchOne() {
  int64_t ns = 1000;
  void* args[] = {&ns};
  ASSERT_EQ(cudaLaunchKernel((const void*)simgpu_test_sleep, dim3(1), dim3(1), args, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A client as xtimer and Kineto start: subscribes, takes the activity buffers, enables kernels.
void StartClient(CUpti_SubscriberHandle* handle, CUpti_BuffersCallbackCompleteFunc completed) {
  ASSERT_EQ(cuptiSubscribe(handle, nullptr, nullptr), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityRegisterCallbacks(Requested, completed), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
}

TEST(CuptiClients, ASecondClientGetsTheSlotAndTheRecordsOnceTheFirstLetGo) {
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);  // the fixture's leftovers
  g_kernels_a = g_kernels_b = 0;
  CUpti_SubscriberHandle a, b;
  ASSERT_NO_FATAL_FAILURE(StartClient(&a, CompletedA));
  LaunchOne();
  EXPECT_EQ(cuptiSubscribe(&b, nullptr, nullptr), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      << "the profiler is refused while the first client holds the slot";
  // The first client lets go: its records flushed to it, its kinds disabled, unsubscribed.
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_EQ(g_kernels_a.load(), 1);
  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiUnsubscribe(a), CUPTI_SUCCESS);
  LaunchOne();  // no kind enabled: a record for nobody
  ASSERT_NO_FATAL_FAILURE(StartClient(&b, CompletedB));
  LaunchOne();
  LaunchOne();
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_EQ(g_kernels_b.load(), 2) << "the second client's records, in its own buffers";
  EXPECT_EQ(g_kernels_a.load(), 1) << "nothing more for the first client";
  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiUnsubscribe(b), CUPTI_SUCCESS);
}

uint64_t CUPTIAPI RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::vector<CUpti_ActivityKernel10> g_kernel_records;
void CUPTIAPI CompletedKeep(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      g_kernel_records.push_back(*reinterpret_cast<CUpti_ActivityKernel10*>(rec));
  free(buffer);
}

TEST(CuptiClients, ATimestampCallbackPutsRecordsOnTheClientsClock) {
  // Kineto registers its own clock: the records must be on it, or its trace drops them.
  ASSERT_EQ(cuptiActivityRegisterTimestampCallback(RealtimeNs), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityRegisterCallbacks(Requested, CompletedKeep), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  g_kernel_records.clear();
  const uint64_t before = RealtimeNs();
  LaunchOne();
  const uint64_t after = RealtimeNs();
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  ASSERT_EQ(g_kernel_records.size(), 1u);
  EXPECT_GE(g_kernel_records[0].start, before);
  EXPECT_LE(g_kernel_records[0].end, after);
  uint64_t now = 0;
  ASSERT_EQ(cuptiGetTimestamp(&now), CUPTI_SUCCESS);
  EXPECT_GE(now, after) << "cuptiGetTimestamp reads the registered clock";
  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
}

TEST(CuptiClients, FinalizeDetachesTheSubscriberKindsAndBufferCallbacks) {
  g_kernels_a = g_kernels_b = 0;
  CUpti_SubscriberHandle a, b;
  ASSERT_NO_FATAL_FAILURE(StartClient(&a, CompletedA));
  LaunchOne();
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_EQ(g_kernels_a.load(), 1);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiSubscribe(&b, nullptr, nullptr), CUPTI_SUCCESS) << "the slot is free after a detach";
  LaunchOne();
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_EQ(g_kernels_a.load() + g_kernels_b.load(), 1) << "no kind stays enabled after a detach";
  ASSERT_EQ(cuptiActivityRegisterCallbacks(Requested, CompletedB), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  LaunchOne();
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  EXPECT_EQ(g_kernels_b.load(), 1);
  EXPECT_EQ(g_kernels_a.load(), 1);
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
  uint64_t now = 0;
  ASSERT_EQ(cuptiGetTimestamp(&now), CUPTI_SUCCESS);
  EXPECT_LT(now, RealtimeNs() / 2) << "the registered clock is forgotten too: the device clock again";
}

}  // namespace

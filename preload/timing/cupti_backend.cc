#include "preload/timing/cupti_backend.h"

#include <cupti.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "preload/base/cupti_handover.h"
#include "preload/base/hook_guard.h"
#include "preload/base/own_gpu_calls.h"
#include "preload/graphs/capture_mode.h"
#include "preload/timing/launch_path.h"
#include "preload/timing/op_names.h"
#include "preload/timing/stream_watch.h"

namespace xtimer::cupti {
namespace {

// Kernels launched inside a matmul/collective hook carry this external correlation kind.
// CUSTOM0/1 are what PyTorch's Kineto pushes; ours must not be mistaken for theirs.
constexpr CUpti_ExternalCorrelationKind kOwnedKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
constexpr size_t kBufferBytes = 1 << 20;
constexpr size_t kMaxOwned = 1 << 16;  // correlation ids remembered while their kernels complete
constexpr uint64_t kFlushEveryNs = 100000000ull;

struct Api {
  decltype(&::cuptiSubscribe) subscribe;
  decltype(&::cuptiUnsubscribe) unsubscribe;
  decltype(&::cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&::cuptiActivityEnable) enable;
  decltype(&::cuptiActivityDisable) disable;
  decltype(&::cuptiActivityFlushAll) flush_all;
  decltype(&::cuptiActivityGetNextRecord) next_record;
  decltype(&::cuptiActivityGetNumDroppedRecords) num_dropped;
  decltype(&::cuptiActivityPushExternalCorrelationId) push_external;
  decltype(&::cuptiActivityPopExternalCorrelationId) pop_external;
  decltype(&::cuptiGetTimestamp) timestamp;
  decltype(&::cuptiGetResultString) result_string;
  decltype(&::cuptiActivityEnableDriverApi) enable_driver_api;
  decltype(&::cuptiActivityEnableRuntimeApi) enable_runtime_api;
  decltype(&::cuptiEnableCallback) enable_callback;
};

// What StreamWatch asks of CUDA.
const StreamWatch::Probe kWatchProbe = {
    [](void* stream, void* context) {
      gpu::Query q = gpu::QueryStream(stream, context);
      return q == gpu::Query::kDone ? 1 : q == gpu::Query::kNotReady ? 0 : -1;
    },
    KernelNameOf,
    [] { return g_active_captures.load(std::memory_order_relaxed) != 0; },
};

// Process-lifetime state, never destroyed: CUPTI may call back while the process exits.
struct State {
  Api api{};
  CUpti_SubscriberHandle subscriber = nullptr;
  int64_t clock_offset_ns = 0;  // host CLOCK_MONOTONIC minus CUPTI's timestamp
  Mutex done_mu;                // CUPTI's thread or the flusher vs. the poller
  std::vector<std::pair<uint8_t*, size_t>> done XT_GUARDED_BY(done_mu);
  std::atomic<uint64_t> dropped{0};
  StreamWatch watch{kWatchProbe};  // streams with unfinished work (stream_watch.h)
  // Poller only.
  uint64_t last_flush_ns = 0;
  std::unordered_set<uint32_t> owned;
  std::deque<uint32_t> owned_order;
};
State* g_state = nullptr;
std::atomic<bool> g_active{false};

// Start and HandOver, one at a time: another client's first call and the library's Start may race.
Mutex g_handover_mu;
uint64_t g_started_ns XT_GUARDED_BY(g_handover_mu) = 0;
char g_handover_note[192];  // written once under g_handover_mu, then published by g_note
std::atomic<const char*> g_note{nullptr};

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  State& st = *g_state;
  size_t dropped = 0;
  if (st.api.num_dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped > 0)
    st.dropped.fetch_add(dropped, std::memory_order_relaxed);
  if (buffer == nullptr) return;
  MutexLock lock(st.done_mu);
  st.done.emplace_back(buffer, valid);
}

void* LoadLibrary(std::string* tried) {
  // The library path first (LD_LIBRARY_PATH, the program's RUNPATH, an already loaded copy),
  // then the CUDA install.
  std::vector<std::string> candidates = {"libcupti.so.13"};
  if (const char* home = getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    candidates.push_back(std::string(home) + "/lib64/libcupti.so.13");
    candidates.push_back(std::string(home) + "/extras/CUPTI/lib64/libcupti.so.13");
  }
  candidates.push_back("/usr/local/cuda/lib64/libcupti.so.13");
  candidates.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  for (const std::string& c : candidates) {
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  *tried = "libcupti.so.13 not found on the library path or in /usr/local/cuda";
  return nullptr;
}

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out, std::string* reason) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) *reason = std::string("libcupti.so.13 lacks ") + name;
  return *out != nullptr;
}

std::string Describe(const Api& api, const char* what, CUptiResult r) {
  const char* text = nullptr;
  if (api.result_string == nullptr || api.result_string(r, &text) != CUPTI_SUCCESS || text == nullptr)
    text = "unknown CUPTI error";
  return std::string(what) + " failed: " + text;
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

constexpr CUpti_CallbackId kDriverLaunches[] = {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                                CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                                                CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                                CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
                                                CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                                                CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz};
constexpr CUpti_CallbackId kRuntimeLaunches[] = {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                                 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
                                                 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
                                                 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
                                                 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
                                                 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000};

// API callbacks (on the launching thread): every kernel and graph launch, and the calls that
// destroy a stream, for StreamWatch. The runtime's own driver calls are nested inside its
// callback and skipped, so a launch counts once, with the id its kernels' records carry.
struct Callback {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
};
constexpr Callback kCallbacks[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2},
    // Captures, also those the capture hooks do not see (the driver's, a static runtime's).
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_v12030},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_ptsz_v12030},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz},
};

// +1 for a call that begins a stream capture, -1 for one that ends it, else 0.
int CaptureStep(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_v12030:
      case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_ptsz_v12030: return 1;
      case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000: return -1;
      default: return 0;
    }
  }
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz: return 1;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz: return -1;
    default: return 0;
  }
}

int MemcpyKind(uint8_t cupti_kind) {
  switch (cupti_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return 1;  // cudaMemcpyHostToDevice
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return 2;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return 3;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return 0;
    default: return 4;  // cudaMemcpyDefault: peer and array copies
  }
}

void RememberOwned(State& st, uint32_t correlation) {
  if (!st.owned.insert(correlation).second) return;
  st.owned_order.push_back(correlation);
  if (st.owned_order.size() > kMaxOwned) {
    st.owned.erase(st.owned_order.front());
    st.owned_order.pop_front();
  }
}

// The launch a callback reports, from the call's parameters (CUPTI's generated *_params
// structs). False for a call that launches nothing (a stream destroy).
bool DecodeLaunch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params, StreamLaunch* l) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000: l->per_thread = true; [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000: {
        // The cooperative form has the same parameters.
        auto* p = static_cast<const cudaLaunchKernel_v7000_params*>(params);
        l->func = p->func;
        l->stream = p->stream;
        return true;
      }
      case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000: l->per_thread = true; [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000: {
        // __cudaLaunchKernel(cudaKernel_t, grid, block, args, shmem, stream): cudaLaunchKernel's
        // parameters with the kernel as a cudaKernel_t (nvcc 13's launch stubs call it).
        auto* p = static_cast<const cudaLaunchKernel_v7000_params*>(params);
        l->func = p->func;
        l->stream = p->stream;
        l->kind = LaunchKind::kLibraryKernel;
        return true;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: l->per_thread = true; [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060: {
        auto* p = static_cast<const cudaLaunchKernelExC_v11060_params*>(params);
        l->func = p->func;
        l->stream = p->config != nullptr ? p->config->stream : nullptr;
        return true;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000: l->per_thread = true; [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000: {
        auto* p = static_cast<const cudaGraphLaunch_v10000_params*>(params);
        l->func = p->graphExec;
        l->stream = p->stream;
        l->kind = LaunchKind::kGraph;
        l->api = "cudaGraphLaunch";
        return true;
      }
      default: return false;
    }
  }
  l->kind = LaunchKind::kDriverKernel;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: l->per_thread = true; [[fallthrough]];
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel: {
      // The cooperative form's parameters are a prefix of cuLaunchKernel's.
      auto* p = static_cast<const cuLaunchKernel_params*>(params);
      l->func = p->f;
      l->stream = p->hStream;
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: l->per_thread = true; [[fallthrough]];
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: {
      auto* p = static_cast<const cuLaunchKernelEx_params*>(params);
      l->func = p->f;
      l->stream = p->config != nullptr ? p->config->hStream : nullptr;
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: l->per_thread = true; [[fallthrough]];
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch: {
      auto* p = static_cast<const cuGraphLaunch_params*>(params);
      l->func = p->hGraph;
      l->stream = p->hStream;
      l->kind = LaunchKind::kGraph;
      l->api = "cuGraphLaunch";
      return true;
    }
    default: return false;
  }
}

// The stream a destroy call names.
void* DestroyedStream(CUpti_CallbackDomain domain, const void* params) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) return static_cast<const cudaStreamDestroy_v5050_params*>(params)->stream;
  return static_cast<const cuStreamDestroy_v2_params*>(params)->hStream;
}

bool IsDestroy(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  return domain == CUPTI_CB_DOMAIN_RUNTIME_API ? cbid == CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050
                                               : cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2;
}

// Tracked calls entered and not left on this thread: the runtime's own driver calls run inside
// its launch (depth 2) and are not counted again.
thread_local int t_callback_depth __attribute__((tls_model("initial-exec"))) = 0;
// A graph launch that no hook times (a dlsym'd cuGraphLaunch, a statically linked runtime): timed
// here with an event pair around it, so a graph that never finishes is in flight as in a hook.
thread_local OpTicket t_graph_ticket;
thread_local bool t_graph_timed __attribute__((tls_model("initial-exec"))) = false;

// The launch path, once the library runs (SetLaunchPath; null before and in a forked child).
std::atomic<LaunchPath*> g_launch{nullptr};

void BeginUnhookedGraph(const StreamLaunch& l) {
  LaunchPath* t = g_launch.load(std::memory_order_acquire);
  if (t == nullptr) return;
  OpKey key;
  key.kind = OpKind::kKernel;
  key.api = l.api;
  key.func = l.func;
  t->Begin(t->Intern(key), l.stream, gpu::Path::kDriver, l.per_thread, -1, &t_graph_ticket);
  t_graph_timed = true;
}

void CUPTIAPI OnApi(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const int capture = CaptureStep(domain, cbid);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (++t_callback_depth != 1) return;
    *cb->correlationData = 0;  // for the exit: the launch's StreamWatch token
    // Counted before the capture begins, like the capture hooks (a hooked one counts twice:
    // only "none" matters); see capture_mode.h.
    if (capture > 0) g_active_captures.fetch_add(1, std::memory_order_relaxed);
    if (IsDestroy(domain, cbid)) {
      g_state->watch.OnDestroy(DestroyedStream(domain, cb->functionParams), false, cb->context);
      return;
    }
    StreamLaunch l;
    if (!DecodeLaunch(domain, cbid, cb->functionParams, &l)) return;
    // A launch into a capturing stream runs only when its graph is launched.
    if (StreamIsCapturing(l.stream, gpu::Path::kDriver, l.per_thread)) return;
    l.context = cb->context;
    l.correlation = cb->correlationId;
    *cb->correlationData = g_state->watch.OnLaunchEntry(l);
    if (l.kind == LaunchKind::kGraph && !InsideHook()) BeginUnhookedGraph(l);
    return;
  }
  // An exit whose entry came before the callbacks were enabled has nothing to close.
  if (t_callback_depth == 0 || --t_callback_depth != 0) return;
  const void* status = cb->functionReturnValue;
  const bool ok = status != nullptr &&
                  (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? *static_cast<const cudaError_t*>(status) == cudaSuccess
                                                         : *static_cast<const CUresult*>(status) == CUDA_SUCCESS);
  // A capture that failed to begin is none; an end, failed or not, ends it.
  if ((capture > 0 && !ok) || (capture < 0 && g_active_captures.load(std::memory_order_relaxed) > 0))
    g_active_captures.fetch_sub(1, std::memory_order_relaxed);
  if (capture != 0) return;
  if (t_graph_timed) {
    t_graph_timed = false;
    if (LaunchPath* t = g_launch.load(std::memory_order_acquire)) t->End(&t_graph_ticket, ok);
  }
  if (ok) g_state->watch.OnLaunched(static_cast<uint32_t>(*cb->correlationData), cb->correlationId);
}

uint64_t HostNs(const State& st, uint64_t cupti_ns) { return static_cast<uint64_t>(cupti_ns + st.clock_offset_ns); }

}  // namespace

void SetLaunchPath(LaunchPath* launch) { g_launch.store(launch, std::memory_order_release); }

bool Start(std::string* reason) {
  MutexLock lock(g_handover_mu);
  // From here on another client's CUPTI calls reach HandOver (which waits for this lock); one that
  // came before keeps CUPTI.
  auto handover_register = reinterpret_cast<CuptiHandoverRegisterFn>(dlsym(RTLD_DEFAULT, kCuptiHandoverRegister));
  if (handover_register != nullptr && handover_register(&HandOver) != 0) {
    *reason =
        "another CUPTI client (a profiler such as PyTorch's or Nsight) came first: the subscriber slot and the "
        "activity buffers are its";
    return false;
  }
  std::string why;
  void* lib = LoadLibrary(&why);
  if (lib == nullptr) {
    *reason = why;
    return false;
  }
  auto* st = new State;  // lives until exit
  Api& a = st->api;
  if (!Resolve(lib, "cuptiSubscribe", &a.subscribe, reason) ||
      !Resolve(lib, "cuptiUnsubscribe", &a.unsubscribe, reason) ||
      !Resolve(lib, "cuptiActivityRegisterCallbacks", &a.register_callbacks, reason) ||
      !Resolve(lib, "cuptiActivityEnable", &a.enable, reason) ||
      !Resolve(lib, "cuptiActivityDisable", &a.disable, reason) ||
      !Resolve(lib, "cuptiActivityFlushAll", &a.flush_all, reason) ||
      !Resolve(lib, "cuptiActivityGetNextRecord", &a.next_record, reason) ||
      !Resolve(lib, "cuptiActivityGetNumDroppedRecords", &a.num_dropped, reason) ||
      !Resolve(lib, "cuptiActivityPushExternalCorrelationId", &a.push_external, reason) ||
      !Resolve(lib, "cuptiActivityPopExternalCorrelationId", &a.pop_external, reason) ||
      !Resolve(lib, "cuptiGetTimestamp", &a.timestamp, reason) ||
      !Resolve(lib, "cuptiGetResultString", &a.result_string, reason) ||
      !Resolve(lib, "cuptiActivityEnableDriverApi", &a.enable_driver_api, reason) ||
      !Resolve(lib, "cuptiActivityEnableRuntimeApi", &a.enable_runtime_api, reason) ||
      !Resolve(lib, "cuptiEnableCallback", &a.enable_callback, reason)) {
    delete st;
    return false;
  }
  // CUPTI serves one subscriber: holding the slot is how another tool (and we) learn of each
  // other. A profiler started later gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED.
  CUptiResult r = a.subscribe(&st->subscriber, OnApi, nullptr);
  if (r != CUPTI_SUCCESS) {
    *reason = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                  ? "another CUPTI subscriber (a profiler such as PyTorch's or Nsight) holds the slot"
                  : Describe(a, "cuptiSubscribe", r);
    delete st;
    return false;
  }
  g_state = st;  // before any callback can run
  r = a.register_callbacks(BufferRequested, BufferCompleted);
  if (r != CUPTI_SUCCESS) {
    *reason = Describe(a, "cuptiActivityRegisterCallbacks", r);
  } else {
    for (CUpti_ActivityKind k : kKinds) {
      r = a.enable(k);
      if (r != CUPTI_SUCCESS) {
        char what[64];
        std::snprintf(what, sizeof what, "cuptiActivityEnable(kind %d)", static_cast<int>(k));
        *reason = Describe(a, what, r);
        break;
      }
    }
    // CUPTI writes external correlation records only in front of API records: ask for those of
    // the launch calls alone (not every runtime/driver call), which is what cuBLAS and NCCL use.
    for (CUpti_CallbackId cbid : kDriverLaunches)
      if (r == CUPTI_SUCCESS && (r = a.enable_driver_api(cbid, 1)) != CUPTI_SUCCESS)
        *reason = Describe(a, "cuptiActivityEnableDriverApi", r);
    for (CUpti_CallbackId cbid : kRuntimeLaunches)
      if (r == CUPTI_SUCCESS && (r = a.enable_runtime_api(cbid, 1)) != CUPTI_SUCCESS)
        *reason = Describe(a, "cuptiActivityEnableRuntimeApi", r);
    // Without the launch callbacks a kernel that never ends would go unseen: fail, and let the
    // event pairs time (and watch) what the hooks see.
    for (const Callback& c : kCallbacks)
      if (r == CUPTI_SUCCESS && (r = a.enable_callback(1, st->subscriber, c.domain, c.cbid)) != CUPTI_SUCCESS)
        *reason = Describe(a, "cuptiEnableCallback", r);
  }
  if (r != CUPTI_SUCCESS) {
    for (const Callback& c : kCallbacks) a.enable_callback(0, st->subscriber, c.domain, c.cbid);
    for (CUpti_CallbackId cbid : kDriverLaunches) a.enable_driver_api(cbid, 0);
    for (CUpti_CallbackId cbid : kRuntimeLaunches) a.enable_runtime_api(cbid, 0);
    for (CUpti_ActivityKind k : kKinds) a.disable(k);
    a.unsubscribe(st->subscriber);
    return false;  // g_state stays: a late buffer callback may still arrive
  }
  uint64_t ts = 0;
  if (a.timestamp(&ts) == CUPTI_SUCCESS)
    st->clock_offset_ns = static_cast<int64_t>(MonotonicNs()) - static_cast<int64_t>(ts);
  g_started_ns = MonotonicNs();
  g_active.store(true, std::memory_order_release);
  return true;
}

bool Active() { return g_active.load(std::memory_order_relaxed); }

void HandOver(const char* entry_point) {
  MutexLock lock(g_handover_mu);
  if (!g_active.load(std::memory_order_acquire)) return;
  State& st = *g_state;
  Api& a = st.api;
  // Nothing new is written for us from here on; then every record written so far comes back to
  // our buffer callback (the poller's next Drain reads it), so no buffer of ours is left for the
  // other client's callbacks, which replace ours process-wide. A kernel that ends after the
  // kinds are disabled, or is launched before Active() turns false, is timed by neither mode.
  for (const Callback& c : kCallbacks) a.enable_callback(0, st.subscriber, c.domain, c.cbid);
  for (CUpti_ActivityKind k : kKinds) a.disable(k);
  for (CUpti_CallbackId cbid : kDriverLaunches) a.enable_driver_api(cbid, 0);
  for (CUpti_CallbackId cbid : kRuntimeLaunches) a.enable_runtime_api(cbid, 0);
  a.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  a.unsubscribe(st.subscriber);
  // Plain kernels and copies take event pairs again; the stream watch, fed no more, is dropped.
  g_active.store(false, std::memory_order_release);
  const double after_s = static_cast<double>(MonotonicNs() - g_started_ns) / 1e9;
  std::snprintf(g_handover_note, sizeof g_handover_note,
                "CUPTI handed over to another client (%s: a profiler such as torch.profiler or Nsight) %.1f s "
                "after start: kernels timed from CUPTI until then, with event pairs since",
                entry_point, after_s);
  g_note.store(g_handover_note, std::memory_order_release);
  Log(LogLevel::kInfo, "%s (hooked launches only, for the rest of the process)", g_handover_note);
}

const char* HandOverNote() { return g_note.load(std::memory_order_acquire); }

StreamWatch* Watch() { return Active() ? &g_state->watch : nullptr; }

void EnterOwnedCall(uint32_t class_id) { g_state->api.push_external(kOwnedKind, class_id); }

void LeaveOwnedCall() {
  uint64_t last = 0;
  g_state->api.pop_external(kOwnedKind, &last);
}

uint64_t Flush(bool force) {
  if (!Active()) return 0;
  State& st = *g_state;
  const uint64_t now = MonotonicNs();
  if (!force && now - st.last_flush_ns < kFlushEveryNs) return 0;
  st.last_flush_ns = now;
  st.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  return now;
}

namespace {

// The fields every timed record has, under the same names in Kernel10, Memcpy6 and Memset4.
template <typename Record>
void TakeTimes(const Record& r, CuptiOp* op, uint32_t* correlation, uint64_t* start, uint64_t* end) {
  op->context = r.contextId;
  op->device = r.deviceId;
  op->stream = r.streamId;
  *correlation = r.correlationId;
  *start = r.start;
  *end = r.end;
}

}  // namespace

void Drain(void (*sink)(void* ctx, const CuptiOp& op), void* ctx) {
  // Also after a hand-over: the records it flushed are read here.
  if (g_state == nullptr) return;
  State& st = *g_state;
  std::vector<std::pair<uint8_t*, size_t>> buffers;
  {
    MutexLock lock(st.done_mu);
    buffers.swap(st.done);
  }
  // External correlation records first: a kernel's may sit in an earlier part of the batch.
  for (auto& [buf, valid] : buffers) {
    CUpti_Activity* rec = nullptr;
    while (st.api.next_record(buf, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) continue;
      auto* ext = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
      if (ext->externalKind == kOwnedKind) RememberOwned(st, ext->correlationId);
    }
  }
  for (auto& [buf, valid] : buffers) {
    CUpti_Activity* rec = nullptr;
    while (st.api.next_record(buf, valid, &rec) == CUPTI_SUCCESS) {
      CuptiOp op;
      uint32_t correlation = 0;
      uint64_t start = 0, end = 0;
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          op.what = CuptiOp::What::kKernel;
          op.name = k->name;
          TakeTimes(*k, &op, &correlation, &start, &end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          op.what = CuptiOp::What::kMemcpy;
          op.memcpy_kind = MemcpyKind(m->copyKind);
          op.async = (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) != 0;
          op.bytes = m->bytes;
          TakeTimes(*m, &op, &correlation, &start, &end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          op.what = CuptiOp::What::kMemset;
          op.async = (m->flags & CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC) != 0;
          op.bytes = m->bytes;
          TakeTimes(*m, &op, &correlation, &start, &end);
          break;
        }
        default: continue;
      }
      // Progress on its stream, whoever owns the op (an end of 0: no time was collected).
      if (end != 0 && end >= start) st.watch.OnRecord(op.context, op.stream, correlation, HostNs(st, end));
      if (st.owned.count(correlation) != 0 || end < start) continue;
      op.start_ns = HostNs(st, start);
      op.dur_ns = end - start;
      sink(ctx, op);
    }
    free(buf);
  }
}

uint64_t Dropped() { return g_state != nullptr ? g_state->dropped.load(std::memory_order_relaxed) : 0; }

}  // namespace xtimer::cupti

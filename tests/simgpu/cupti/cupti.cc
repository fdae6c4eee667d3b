// Simulated libcupti.so.13: the Activity API subset a tracer uses, fed by the simulated
// driver (common/activity.h). Records are the CUDA 13 header's structs
// (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
// CUpti_ActivityExternalCorrelation), written into buffers the client hands out through its
// bufferRequested callback and returned through bufferCompleted: from the `sgpu-cupti`
// thread when a buffer is full, and from the caller of cuptiActivityFlushAll. One callback
// subscriber at a time, as in the real CUPTI (13.2 and earlier); the Activity API is the
// process's, not a subscriber's: the buffer callbacks registered last receive every buffer and the
// enabled kinds are shared, whoever enabled them. cuptiFinalize detaches CUPTI: the slot is free,
// no kind or callback stays enabled, no buffer is kept. API callbacks are delivered for the calls the
// simulated runtime and driver report (their kernel and graph launches and stream destroys,
// common/activity.h) once enabled with cuptiEnableCallback/cuptiEnableDomain; no API
// (DRIVER/RUNTIME) records are written, though enabling them makes external correlation records
// flow.
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/activity.h"
#include "common/simgpu_clock.h"
#include "common/simgpu_env.h"

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using simgpu::ActivityOp;
using simgpu::ActivityRecord;

struct Buffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  size_t used = 0;
};

constexpr uint32_t kCallbackIdWords = 16;  // callback ids below 1024

// Everything is leaked on purpose: stream workers may report while the process exits.
struct State {
  std::mutex mu;  // buffers, callbacks, names
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  Buffer current;
  std::deque<Buffer> full;  // waiting for delivery
  size_t dropped = 0;
  std::unordered_map<const void*, const char*> names;  // kernel -> name (never freed)

  std::mutex deliver_mu;  // one delivery at a time, in buffer order
  std::condition_variable wake;
  bool deliverer_started = false;

  std::atomic<bool> enabled[CUPTI_ACTIVITY_KIND_COUNT] = {};
  // API records of some calls wanted (kind DRIVER/RUNTIME, or cuptiActivityEnable{Driver,Runtime}Api):
  // the real CUPTI writes external correlation records in front of API records only.
  std::atomic<int> api_enabled{0};
  bool feed_installed = false;

  std::mutex sub_mu;
  bool subscribed = false;
  // What API calls (Api) read without a lock: the subscriber's callback and user data while
  // subscribed (one pair per subscription, never freed: a call that read it may still use it
  // after an unsubscribe and a new subscriber), and the enabled callback ids per domain (0
  // driver, 1 runtime).
  struct Subscriber {
    CUpti_CallbackFunc callback;
    void* userdata;
  };
  std::atomic<const Subscriber*> live{nullptr};
  std::deque<Subscriber> subscriptions;  // every pair ever published (sub_mu): addresses stay
  std::atomic<uint64_t> cb_enabled[2][kCallbackIdWords] = {};
  // The client's clock for timestamps (cuptiActivityRegisterTimestampCallback), else the device clock.
  std::atomic<CUpti_TimestampCallbackFunc> timestamp{nullptr};
};
State& S() {
  static State* s = new State;
  return *s;
}

// External correlation ids pushed on this thread, per kind.
thread_local std::vector<uint64_t> tls_external[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

const char* KernelName(State& st, const void* func) {
  auto it = st.names.find(func);
  if (it != st.names.end()) return it->second;
  // The driver's own answer (a registered kernel's device name, else the exported symbol's).
  static auto* get_name = reinterpret_cast<CUresult (*)(const char**, const void*)>(
      dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuFuncGetName"));
  const char* raw = nullptr;
  std::string name;
  if (get_name && get_name(&raw, func) == CUDA_SUCCESS && raw) {
    name = raw;
  } else {
    char buf[48];
    snprintf(buf, sizeof buf, "kernel@%p", func);
    name = buf;
  }
  const char* kept = strdup(name.c_str());
  st.names.emplace(func, kept);
  return kept;
}

// Space for `bytes` in the current buffer (st.mu held); nullptr when the client gave none.
uint8_t* Reserve(State& st, size_t bytes) {
  if (st.current.data && st.current.size - st.current.used < bytes) {
    st.full.push_back(st.current);
    st.current = Buffer{};
    st.wake.notify_one();
  }
  if (!st.current.data) {
    if (!st.request) return nullptr;
    uint8_t* data = nullptr;
    size_t size = 0, max_records = 0;
    st.request(&data, &size, &max_records);
    if (!data || size < bytes) return nullptr;
    st.current = Buffer{data, size, 0};
  }
  uint8_t* p = st.current.data + st.current.used;
  st.current.used += (bytes + 7) & ~size_t(7);
  return p;
}

template <typename Rec>
void Append(State& st, const Rec& r) {
  if (uint8_t* p = Reserve(st, sizeof r)) {
    memcpy(p, &r, sizeof r);
  } else {
    ++st.dropped;
  }
}

// The fields the kernel, memcpy and memset records share, under the same names, from the
// simulated device's record of the operation.
template <typename Rec>
void FillCommon(const ActivityRecord& a, Rec* r) {
  // On the client's clock when it registered one (as Kineto does): the device clock's offset to
  // it, read as the record is written.
  int64_t offset = 0;
  if (CUpti_TimestampCallbackFunc ts = S().timestamp.load(std::memory_order_acquire))
    offset = int64_t(ts()) - simgpu::now_ns();
  r->start = uint64_t(a.start_ns + offset);
  r->end = uint64_t(a.end_ns + offset);
  r->deviceId = a.device;
  r->contextId = a.context;
  r->streamId = a.stream;
  r->correlationId = a.correlation;
  r->graphId = a.graph_id;
}

void Deliver(State& st, const Buffer& b) {
  if (st.complete) st.complete(nullptr, 0, b.data, b.size, b.used);
}

// The `sgpu-cupti` thread: hands full buffers back to the client.
void DelivererLoop() {
  pthread_setname_np(pthread_self(), "sgpu-cupti");
  State& st = S();
  std::unique_lock lk(st.mu);
  for (;;) {
    st.wake.wait(lk, [&] { return !st.full.empty(); });
    // deliver_mu before taking the buffer: flushes and this thread keep buffer order.
    lk.unlock();
    std::lock_guard dl(st.deliver_mu);
    lk.lock();
    while (!st.full.empty()) {
      Buffer b = st.full.front();
      st.full.pop_front();
      lk.unlock();
      Deliver(st, b);
      lk.lock();
    }
  }
}

void Issued(uint32_t correlation) {
  State& st = S();
  if (!st.enabled[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION].load(std::memory_order_relaxed) ||
      st.api_enabled.load(std::memory_order_relaxed) <= 0)
    return;
  for (int k = 0; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++k) {
    if (tls_external[k].empty()) continue;
    CUpti_ActivityExternalCorrelation r{};
    r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    r.externalKind = CUpti_ExternalCorrelationKind(k);
    r.externalId = tls_external[k].back();
    r.correlationId = correlation;
    std::lock_guard lk(st.mu);
    Append(st, r);
  }
}

void Completed(const ActivityRecord& a) {
  State& st = S();
  switch (a.op) {
    case ActivityOp::Kernel: {
      if (!st.enabled[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL].load(std::memory_order_relaxed) &&
          !st.enabled[CUPTI_ACTIVITY_KIND_KERNEL].load(std::memory_order_relaxed))
        return;
      CUpti_ActivityKernel10 r{};
      r.kind = st.enabled[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                                                                 : CUPTI_ACTIVITY_KIND_KERNEL;
      FillCommon(a, &r);
      r.completed = r.end;
      r.gridX = r.gridY = r.gridZ = r.blockX = r.blockY = r.blockZ = 1;
      std::lock_guard lk(st.mu);
      r.name = KernelName(st, a.func);
      Append(st, r);
      return;
    }
    case ActivityOp::Memcpy: {
      if (!st.enabled[CUPTI_ACTIVITY_KIND_MEMCPY].load(std::memory_order_relaxed)) return;
      CUpti_ActivityMemcpy6 r{};
      r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      r.copyKind = a.copy_kind;
      r.flags = a.async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
      r.bytes = a.bytes;
      FillCommon(a, &r);
      std::lock_guard lk(st.mu);
      Append(st, r);
      return;
    }
    case ActivityOp::Memset: {
      if (!st.enabled[CUPTI_ACTIVITY_KIND_MEMSET].load(std::memory_order_relaxed)) return;
      CUpti_ActivityMemset4 r{};
      r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
      r.value = a.value;
      r.bytes = a.bytes;
      r.flags = a.async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
      FillCommon(a, &r);
      std::lock_guard lk(st.mu);
      Append(st, r);
      return;
    }
  }
}

// The index of a callback domain in State::cb_enabled, or -1.
int DomainIndex(uint32_t domain) {
  return domain == CUPTI_CB_DOMAIN_DRIVER_API ? 0 : domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 1 : -1;
}

// Kernel names for symbolName, remembered per thread (the shared table takes st.mu).
const char* SymbolName(State& st, const void* kernel) {
  thread_local const void* last = nullptr;
  thread_local const char* last_name = nullptr;
  if (kernel != last) {
    std::lock_guard lk(st.mu);
    last_name = KernelName(st, kernel);
    last = kernel;
  }
  return last_name;
}

// The entry or exit of an API call: the subscriber's callback, if it enabled this one.
void Api(const simgpu::ApiCall& call) {
  State& st = S();
  const State::Subscriber* sub = st.live.load(std::memory_order_acquire);
  CUpti_CallbackFunc fn = sub != nullptr ? sub->callback : nullptr;
  const int d = DomainIndex(call.domain);
  if (fn == nullptr || d < 0 || call.cbid >= kCallbackIdWords * 64 ||
      !(st.cb_enabled[d][call.cbid / 64].load(std::memory_order_relaxed) & (1ull << (call.cbid % 64))))
    return;
  // correlationData is shared by a call's entry and exit; calls nest (runtime -> driver).
  thread_local uint64_t data[16];
  thread_local int depth = 0;
  if (!call.exit) ++depth;
  CUpti_CallbackData cb{};
  cb.callbackSite = call.exit ? CUPTI_API_EXIT : CUPTI_API_ENTER;
  cb.functionName = call.function;
  cb.functionParams = call.params;
  cb.functionReturnValue = call.exit ? const_cast<void*>(call.status) : nullptr;
  cb.symbolName = call.kernel != nullptr ? SymbolName(st, call.kernel) : nullptr;
  cb.context = static_cast<CUcontext>(call.context);
  cb.contextUid = 1;
  cb.correlationData = &data[(depth - 1) & 15];
  cb.correlationId = call.correlation;
  if (!call.exit) data[(depth - 1) & 15] = 0;
  fn(sub->userdata, static_cast<CUpti_CallbackDomain>(call.domain), call.cbid, &cb);
  if (call.exit && depth > 0) --depth;
}

const simgpu::ActivitySink kSink{Issued, Completed, Api};

// Connects to the simulated driver once (st.mu held). False if libcuda is not the simulated one.
bool InstallFeed(State& st) {
  if (st.feed_installed) return true;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  auto set =
      h ? reinterpret_cast<void (*)(const simgpu::ActivitySink*)>(dlsym(h, "simgpu_activity_set_sink")) : nullptr;
  if (!set) return false;
  set(&kSink);
  st.feed_installed = true;
  return true;
}

size_t RecordSize(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);  // enabled, never written
    default: return 0;
  }
}

bool Supported(CUpti_ActivityKind kind) { return RecordSize(kind) != 0; }

}  // namespace

SIMGPU_EXPORT CUptiResult cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_QUEUE_EMPTY: *str = "CUPTI_ERROR_QUEUE_EMPTY"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_NOT_SUPPORTED: *str = "CUPTI_ERROR_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
  }
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  CUpti_TimestampCallbackFunc ts = S().timestamp.load(std::memory_order_acquire);
  *timestamp = ts != nullptr ? ts() : uint64_t(simgpu::now_ns());  // the client's clock, else the device's
  return CUPTI_SUCCESS;
}

// Timestamps from the client's clock from now on (records and cuptiGetTimestamp), as the real
// CUPTI does; without one they are the simulated device clock (the real CUPTI's default on
// Linux is CLOCK_REALTIME).
SIMGPU_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc func) {
  if (!func) return CUPTI_ERROR_INVALID_PARAMETER;
  simgpu::log("cupti: cuptiActivityRegisterTimestampCallback");
  S().timestamp.store(func, std::memory_order_release);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                         CUpti_BuffersCallbackCompleteFunc completed) {
  if (!requested || !completed) return CUPTI_ERROR_INVALID_PARAMETER;
  State& st = S();
  std::lock_guard lk(st.mu);
  simgpu::log("cupti: cuptiActivityRegisterCallbacks (%s)", st.complete ? "replacing the registered ones" : "first");
  st.request = requested;
  st.complete = completed;
  if (!st.deliverer_started) {
    st.deliverer_started = true;
    std::thread(DelivererLoop).detach();
  }
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  simgpu::log("cupti: cuptiActivityEnable(kind %d)%s", int(kind), Supported(kind) ? "" : ": not supported");
  if (!Supported(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
  State& st = S();
  {
    std::lock_guard lk(st.mu);
    if (!InstallFeed(st)) return CUPTI_ERROR_NOT_INITIALIZED;
  }
  if (!st.enabled[kind].exchange(true, std::memory_order_relaxed) &&
      (kind == CUPTI_ACTIVITY_KIND_DRIVER || kind == CUPTI_ACTIVITY_KIND_RUNTIME))
    st.api_enabled.fetch_add(1, std::memory_order_relaxed);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (!Supported(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
  State& st = S();
  if (st.enabled[kind].exchange(false, std::memory_order_relaxed) &&
      (kind == CUPTI_ACTIVITY_KIND_DRIVER || kind == CUPTI_ACTIVITY_KIND_RUNTIME))
    st.api_enabled.fetch_sub(1, std::memory_order_relaxed);
  return CUPTI_SUCCESS;
}

namespace {
// cbids with API records enabled one by one, per domain (0 driver, 1 runtime).
std::mutex g_api_mu;
std::set<uint32_t> g_api_cbids[2];

CUptiResult EnableApi(int domain, CUpti_CallbackId cbid, uint8_t enable) {
  State& st = S();
  std::lock_guard lk(g_api_mu);
  const bool changed = enable ? g_api_cbids[domain].insert(cbid).second : g_api_cbids[domain].erase(cbid) > 0;
  if (changed) st.api_enabled.fetch_add(enable ? 1 : -1, std::memory_order_relaxed);
  return CUPTI_SUCCESS;
}
}  // namespace

// No API record is written; enabling any makes external correlation records flow (as on the real CUPTI,
// where they precede API records).
SIMGPU_EXPORT CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  return EnableApi(0, cbid, enable);
}

SIMGPU_EXPORT CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  return EnableApi(1, cbid, enable);
}

// Every record written so far goes back to the client, on this thread (the flag does not
// matter here: records are written only once their op completed).
SIMGPU_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t /*flag*/) {
  State& st = S();
  std::lock_guard dl(st.deliver_mu);
  std::unique_lock lk(st.mu);
  if (st.current.data && st.current.used) {
    st.full.push_back(st.current);
    st.current = Buffer{};
  }
  while (!st.full.empty()) {
    Buffer b = st.full.front();
    st.full.pop_front();
    lk.unlock();
    Deliver(st, b);
    lk.lock();
  }
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t) { return CUPTI_SUCCESS; }

SIMGPU_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t off = 0;
  if (*record) {
    auto* cur = reinterpret_cast<uint8_t*>(*record);
    if (cur < buffer || cur >= buffer + valid) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t size = RecordSize((*record)->kind);
    if (!size) return CUPTI_ERROR_INVALID_KIND;
    off = size_t(cur - buffer) + ((size + 7) & ~size_t(7));
  }
  if (off + sizeof(CUpti_Activity) > valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + off);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  State& st = S();
  std::lock_guard lk(st.mu);
  *dropped = st.dropped;
  st.dropped = 0;
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  tls_external[kind].push_back(id);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* last) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  auto& stack = tls_external[kind];
  if (stack.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (last) *last = stack.back();
  stack.pop_back();
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                         void* userdata) {
  if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
  State& st = S();
  std::lock_guard lk(st.sub_mu);
  simgpu::log("cupti: cuptiSubscribe%s", st.subscribed ? ": refused, the slot is taken" : "");
  if (st.subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  st.subscribed = true;
  for (auto& domain : st.cb_enabled)
    for (auto& word : domain) word.store(0, std::memory_order_relaxed);
  st.subscriptions.push_back(State::Subscriber{callback, userdata});
  st.live.store(callback != nullptr ? &st.subscriptions.back() : nullptr, std::memory_order_release);
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&st);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  State& st = S();
  std::lock_guard lk(st.sub_mu);
  if (!st.subscribed || subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&st))
    return CUPTI_ERROR_INVALID_PARAMETER;
  simgpu::log("cupti: cuptiUnsubscribe");
  st.subscribed = false;
  st.live.store(nullptr, std::memory_order_release);
  return CUPTI_SUCCESS;
}

namespace {
// Enables (or disables) callback ids [first, last] of `domain` for the subscriber. Domains
// other than the driver's and the runtime's are accepted and never called back.
CUptiResult EnableCallbacks(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain,
                            uint32_t first, uint32_t last) {
  State& st = S();
  {
    std::lock_guard lk(st.sub_mu);
    if (!st.subscribed || subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&st))
      return CUPTI_ERROR_INVALID_PARAMETER;
  }
  const int d = DomainIndex(domain);
  if (d < 0) return CUPTI_SUCCESS;
  {
    std::lock_guard lk(st.mu);
    if (enable && !InstallFeed(st)) return CUPTI_ERROR_NOT_INITIALIZED;
  }
  for (uint32_t id = first; id <= last && id < kCallbackIdWords * 64; ++id) {
    const uint64_t bit = 1ull << (id % 64);
    if (enable) st.cb_enabled[d][id / 64].fetch_or(bit, std::memory_order_relaxed);
    else st.cb_enabled[d][id / 64].fetch_and(~bit, std::memory_order_relaxed);
  }
  return CUPTI_SUCCESS;
}
}  // namespace

SIMGPU_EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                            CUpti_CallbackDomain domain) {
  return EnableCallbacks(enable, subscriber, domain, 0, kCallbackIdWords * 64 - 1);
}

SIMGPU_EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                              CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  return EnableCallbacks(enable, subscriber, domain, cbid, cbid);
}

// Detaches CUPTI from the process, as the real one does (Kineto calls it at the exit of an API
// callback once a trace is done): the subscriber is gone and the slot free, no activity kind, API
// record or callback stays enabled, and the buffer callbacks are forgotten. The client flushes
// first (so the real documentation asks); a buffer it did not flush is dropped, never handed to
// the next client.
SIMGPU_EXPORT CUptiResult cuptiFinalize() {
  State& st = S();
  simgpu::log("cupti: cuptiFinalize");
  {
    std::lock_guard lk(st.sub_mu);
    st.subscribed = false;
    st.live.store(nullptr, std::memory_order_release);
    for (auto& domain : st.cb_enabled)
      for (auto& word : domain) word.store(0, std::memory_order_relaxed);
  }
  for (auto& kind : st.enabled) kind.store(false, std::memory_order_relaxed);
  {
    std::lock_guard lk(g_api_mu);
    g_api_cbids[0].clear();
    g_api_cbids[1].clear();
  }
  st.api_enabled.store(0, std::memory_order_relaxed);
  std::lock_guard dl(st.deliver_mu);
  std::lock_guard lk(st.mu);
  st.current = Buffer{};
  st.full.clear();
  st.request = nullptr;
  st.complete = nullptr;
  st.timestamp.store(nullptr, std::memory_order_release);
  return CUPTI_SUCCESS;
}

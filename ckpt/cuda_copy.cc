#include "ckpt/cuda_copy.h"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>

#include "common/cuda_libraries.h"
#include "common/log.h"
#include "common/mutex.h"

namespace xtimer::ckpt {
namespace {

// The few runtime API calls used, declared here so that no CUDA header or library is needed
// to build. Error codes are ints (cudaSuccess = 0); streams and events are opaque pointers.
struct CudaRt {
  using Stream = void*;
  using Event = void*;
  int (*GetDevice)(int*) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*HostAlloc)(void**, size_t, unsigned) = nullptr;
  int (*FreeHost)(void*) = nullptr;
  int (*StreamCreate)(Stream*) = nullptr;
  int (*StreamSynchronize)(Stream) = nullptr;
  int (*MemcpyAsync)(void*, const void*, size_t, int, Stream) = nullptr;
  int (*EventCreate)(Event*) = nullptr;
  int (*EventRecord)(Event, Stream) = nullptr;
  int (*EventSynchronize)(Event) = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
  std::string library;

  static constexpr int kMemcpyDeviceToHost = 2;

  std::string Err(int code) const {
    const char* s = GetErrorString != nullptr ? GetErrorString(code) : nullptr;
    return "CUDA error " + std::to_string(code) + (s != nullptr ? std::string(" (") + s + ")" : "");
  }
};

template <typename F>
bool Sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

const CudaRt* LoadRuntime(std::string* error) {
  static std::once_flag once;
  static CudaRt rt;
  static std::string load_error;
  static bool ok = false;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : kCudartSonames) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) {
        rt.library = name;
        break;
      }
    }
    if (lib == nullptr) {
      const char* e = dlerror();
      load_error = std::string("cannot load the CUDA runtime (") + kCudartSonamesText + "): " + (e ? e : "not found");
      return;
    }
    bool all = Sym(lib, "cudaGetDevice", &rt.GetDevice) && Sym(lib, "cudaSetDevice", &rt.SetDevice) &&
               Sym(lib, "cudaHostAlloc", &rt.HostAlloc) && Sym(lib, "cudaFreeHost", &rt.FreeHost) &&
               Sym(lib, "cudaStreamCreate", &rt.StreamCreate) &&
               Sym(lib, "cudaStreamSynchronize", &rt.StreamSynchronize) &&
               Sym(lib, "cudaMemcpyAsync", &rt.MemcpyAsync) && Sym(lib, "cudaEventCreate", &rt.EventCreate) &&
               Sym(lib, "cudaEventRecord", &rt.EventRecord) && Sym(lib, "cudaEventSynchronize", &rt.EventSynchronize);
    Sym(lib, "cudaGetErrorString", &rt.GetErrorString);
    if (!all) {
      load_error = rt.library + " lacks a runtime API function the checkpoint needs";
      return;
    }
    ok = true;
  });
  if (!ok) *error = load_error;
  return ok ? &rt : nullptr;
}

// Pinned buffers, a stream and events per device, kept for the life of the process.
struct DeviceStaging {
  int device = -1;
  uint64_t chunk = 0;
  std::vector<void*> buffers;
  std::vector<void*> events;
  void* stream = nullptr;
};

Mutex g_staging_mu;
// Kept for the life of the process (pinned memory is slow to allocate); never destroyed, so it
// is still valid in atexit handlers and reachable for leak checkers.
std::vector<DeviceStaging*>& Staging() XT_REQUIRES(g_staging_mu) {
  static auto* all = new std::vector<DeviceStaging*>;
  return *all;
}

void FreeStaging(const CudaRt& rt, DeviceStaging* s) {
  if (s->stream != nullptr) rt.StreamSynchronize(s->stream);
  for (void* b : s->buffers) rt.FreeHost(b);
  delete s;  // streams and events are left to the runtime (no destroy calls needed elsewhere)
}

Status GetStaging(const CudaRt& rt, int device, const StagingConfig& cfg, DeviceStaging** out)
    XT_REQUIRES(g_staging_mu) {
  for (DeviceStaging* s : Staging())
    if (s->device == device && s->chunk == cfg.chunk_bytes && static_cast<int>(s->buffers.size()) == cfg.buffers) {
      *out = s;
      return Status::Ok();
    }
  auto* s = new DeviceStaging;
  s->device = device;
  s->chunk = cfg.chunk_bytes;
  auto fail = [&](std::string msg) {
    FreeStaging(rt, s);
    return Status::Error(std::move(msg));
  };
  int rc = rt.StreamCreate(&s->stream);
  if (rc != 0) return fail("cudaStreamCreate on device " + std::to_string(device) + ": " + rt.Err(rc));
  for (int i = 0; i < cfg.buffers; ++i) {
    void* buf = nullptr;
    void* ev = nullptr;
    rc = rt.HostAlloc(&buf, cfg.chunk_bytes, 0);
    if (rc != 0)
      return fail("cudaHostAlloc of a " + std::to_string(cfg.chunk_bytes) +
                  "-byte pinned staging buffer: " + rt.Err(rc));
    s->buffers.push_back(buf);
    rc = rt.EventCreate(&ev);
    if (rc != 0) return fail("cudaEventCreate: " + rt.Err(rc));
    s->events.push_back(ev);
  }
  Staging().push_back(s);
  *out = s;
  return Status::Ok();
}

struct Chunk {
  size_t entry;
  uint64_t off;
  uint64_t len;
};

}  // namespace

bool CudaRuntimeAvailable(std::string* detail) {
  std::string err;
  const CudaRt* rt = LoadRuntime(&err);
  *detail = rt != nullptr ? rt->library : err;
  return rt != nullptr;
}

Status CopyCudaSources(const std::vector<Source>& sources, const std::vector<size_t>& which, unsigned char* base,
                       const std::vector<uint64_t>& offsets, std::vector<Checksum>* sums, int threads,
                       const StagingConfig& cfg, CudaCopyStats* stats) {
  std::string err;
  const CudaRt* rt = LoadRuntime(&err);
  if (rt == nullptr) return Status::Error("a CUDA tensor was given but " + err);
  if (cfg.buffers < 1 || cfg.chunk_bytes < 64 || cfg.chunk_bytes % 64 != 0)
    return Status::Error("internal: bad staging configuration");
  MutexLock lock(g_staging_mu);
  int saved_device = -1;
  rt->GetDevice(&saved_device);
  struct Restore {
    const CudaRt* rt;
    int dev;
    ~Restore() {
      if (dev >= 0) rt->SetDevice(dev);
    }
  } restore{rt, saved_device};

  std::vector<Fletcher> total(sources.size());
  // Device by device; within a device, every entry's chunks in one pipeline.
  std::vector<int> devices;
  for (size_t i : which)
    if (std::find(devices.begin(), devices.end(), sources[i].cuda_device) == devices.end())
      devices.push_back(sources[i].cuda_device);
  for (int dev : devices) {
    int rc = rt->SetDevice(dev);
    if (rc != 0) return Status::Error("cudaSetDevice(" + std::to_string(dev) + "): " + rt->Err(rc));
    DeviceStaging* st = nullptr;
    XT_RETURN_IF_ERROR(GetStaging(*rt, dev, cfg, &st));
    std::vector<Chunk> chunks;
    for (size_t i : which) {
      const Source& s = sources[i];
      if (s.cuda_device != dev) continue;
      if (!s.Contiguous())
        return Status::Error("internal: a non-contiguous CUDA tensor reached the copy (make it contiguous first)");
      for (uint64_t off = 0; off < s.nbytes; off += cfg.chunk_bytes)
        chunks.push_back({i, off, std::min(cfg.chunk_bytes, s.nbytes - off)});
    }
    const size_t nbuf = st->buffers.size();
    auto issue = [&](size_t k) -> Status {
      const Chunk& c = chunks[k];
      void* buf = st->buffers[k % nbuf];
      const auto* src = static_cast<const unsigned char*>(sources[c.entry].ptr) + c.off;
      int r = rt->MemcpyAsync(buf, src, c.len, CudaRt::kMemcpyDeviceToHost, st->stream);
      if (r != 0) return Status::Error("cudaMemcpyAsync (device " + std::to_string(dev) + " to host): " + rt->Err(r));
      r = rt->EventRecord(st->events[k % nbuf], st->stream);
      if (r != 0) return Status::Error("cudaEventRecord: " + rt->Err(r));
      return Status::Ok();
    };
    size_t issued = 0;
    Status failed;
    for (; issued < std::min(nbuf, chunks.size()); ++issued) {
      failed = issue(issued);
      if (!failed.ok()) break;
    }
    for (size_t k = 0; k < chunks.size() && failed.ok(); ++k) {
      int r = rt->EventSynchronize(st->events[k % nbuf]);
      if (r != 0) {
        failed = Status::Error("waiting for a device-to-host copy: " + rt->Err(r));
        break;
      }
      const Chunk& c = chunks[k];
      if (stats != nullptr) {
        ++stats->chunks;
        stats->max_in_flight = std::max(stats->max_in_flight, static_cast<int>(issued - k - 1));
      }
      // While the threads copy this chunk into shared memory, the next ones are in flight.
      Fletcher part = ParallelCopy(base + offsets[c.entry] + c.off, st->buffers[k % nbuf], c.len, threads, true);
      total[c.entry].Append(part);
      if (issued < chunks.size()) {
        failed = issue(issued);
        ++issued;
      }
    }
    if (!failed.ok()) {
      rt->StreamSynchronize(st->stream);  // never leave copies running into our buffers
      return failed;
    }
  }
  for (size_t i : which) (*sums)[i] = total[i].Finish();
  return Status::Ok();
}

}  // namespace xtimer::ckpt

// cuInit, devices, primary contexts and the per-thread current context.
#include <cstdio>
#include <cstring>

#include "common/simgpu_env.h"
#include "driver/driver.h"

namespace simgpu::drv {
namespace {

struct DriverState {
  std::once_flag once;
  std::atomic<CUresult> status{CUDA_ERROR_NOT_INITIALIZED};
  int count = 0;
  Device devices[16];
  std::mutex m;
};

DriverState& state() {
  static DriverState* s = new DriverState;  // leaked: workers may outlive exit()
  return *s;
}

thread_local Context* tls_current = nullptr;
thread_local std::vector<Context*> tls_stack;

Context* create_context(Device* d) {
  auto* c = new Context;
  c->magic = kCtxMagic;
  c->dev = d;
  c->legacy = make_stream(c, Stream::Kind::Legacy, 0, 0);
  return c;
}

CUresult check_init() {
  CUresult st = init_status();
  return st;
}

}  // namespace

CUresult init_status() { return state().status.load(std::memory_order_acquire); }
int device_count() { return state().count; }
Device* device(int ordinal) {
  auto& s = state();
  if (ordinal < 0 || ordinal >= s.count) return nullptr;
  return &s.devices[ordinal];
}

Context* as_context(CUcontext c) {
  auto* ctx = reinterpret_cast<Context*>(c);
  return (ctx && ctx->magic == kCtxMagic) ? ctx : nullptr;
}

Context* current_context_strict() { return tls_current; }

Context* current_context() {
  if (tls_current) return tls_current;
  auto& s = state();
  std::lock_guard lk(s.m);
  for (int i = 0; i < s.count; ++i)
    if (s.devices[i].primary) return s.devices[i].primary;
  return nullptr;
}

void Context::add_stream(const std::shared_ptr<Stream>& s) {
  std::lock_guard lk(m);
  std::erase_if(streams, [](const std::weak_ptr<Stream>& w) { return w.expired(); });
  streams.push_back(s);
}

std::vector<std::shared_ptr<Stream>> Context::live_streams() {
  std::vector<std::shared_ptr<Stream>> out;
  std::lock_guard lk(m);
  for (auto& w : streams)
    if (auto s = w.lock()) out.push_back(std::move(s));
  return out;
}

void Context::synchronize() {
  legacy->wait_for(legacy->enqueued.load());
  for (auto& s : live_streams()) s->wait_for(s->enqueued.load());
}

}  // namespace simgpu::drv

using namespace simgpu::drv;

// ---------------------------------------------------------------- init / version

SIMGPU_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto& s = state();
  std::call_once(s.once, [&] {
    // SIMGPU_DEVICES=0 is a machine with a driver but no GPU.
    int64_t n = simgpu::env_int("SIMGPU_DEVICES", 1);
    if (n < 0) n = 0;
    if (n > 16) n = 16;
    const double gb = simgpu::env_double("SIMGPU_MEM_GB", 80.0);
    for (int i = 0; i < n; ++i) {
      s.devices[i].ordinal = i;
      s.devices[i].total_mem = uint64_t(gb * 1024.0 * 1024.0 * 1024.0);
    }
    s.count = int(n);
    s.status.store(n == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS, std::memory_order_release);
    simgpu::log("cuInit: %d simulated device(s)", int(n));
  });
  return init_status();
}

SIMGPU_EXPORT CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;  // CUDA 13.0
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- devices

SIMGPU_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = 0;
  if (CUresult st = check_init()) return st;
  *count = device_count();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  if (!device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, size_t(len), "%s", "xtimer simulated GPU");
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  Device* dev = device(d);
  if (!dev) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = dev->total_mem;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice d) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
  static const char base[16] = {'s', 'i', 'm', 'g', 'p', 'u', '-', 'x', 't', 'i', 'm', 'e', 'r', 0, 0, 0};
  memcpy(uuid->bytes, base, 16);
  uuid->bytes[15] = char(d);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice d) { return cuDeviceGetUuid_v2(uuid, d); }

SIMGPU_EXPORT CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice d) {
  if (!id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(id, size_t(len), "00000000:%02X:00.0", 0x18 + int(d));
  return CUDA_SUCCESS;
}

// Values of an H100 SXM, close enough for code that sizes launches from them.
SIMGPU_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attr, CUdevice d) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
  int v = 0;
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = 132; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = 0x18 + int(d); break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 50 * 1024 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 3; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
    default: v = 0; break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- primary contexts

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice d) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  Device* dev = device(d);
  if (!dev) return CUDA_ERROR_INVALID_DEVICE;
  auto& s = state();
  std::lock_guard lk(s.m);
  if (!dev->primary) dev->primary = create_context(dev);
  ++dev->primary_refs;
  *pctx = reinterpret_cast<CUcontext>(dev->primary);
  return CUDA_SUCCESS;
}

// Primary contexts are never torn down: stream workers may still reference them.
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (CUresult st = check_init()) return st;
  Device* dev = device(d);
  if (!dev) return CUDA_ERROR_INVALID_DEVICE;
  auto& s = state();
  std::lock_guard lk(s.m);
  if (dev->primary_refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  --dev->primary_refs;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
  if (CUresult st = check_init()) return st;
  Device* dev = device(d);
  if (!dev) return CUDA_ERROR_INVALID_DEVICE;
  if (dev->primary) dev->primary->synchronize();
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) { return cuDevicePrimaryCtxReset_v2(d); }

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
  if (CUresult st = check_init()) return st;
  Device* dev = device(d);
  if (!dev) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(state().m);
  dev->primary_flags = flags;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(d, flags);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  Device* dev = device(d);
  if (!dev) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(state().m);
  *flags = dev->primary_flags;
  *active = dev->primary_refs > 0;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- current context

SIMGPU_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  *pctx = reinterpret_cast<CUcontext>(tls_current);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  if (CUresult st = check_init()) return st;
  if (c && !as_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
  tls_current = as_context(c);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
  if (CUresult st = check_init()) return st;
  if (!as_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
  tls_stack.push_back(tls_current);
  tls_current = as_context(c);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult st = check_init()) return st;
  if (!tls_current) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(tls_current);
  if (tls_stack.empty()) {
    tls_current = nullptr;
  } else {
    tls_current = tls_stack.back();
    tls_stack.pop_back();
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetDevice(CUdevice* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = check_init()) return st;
  if (!tls_current) return CUDA_ERROR_INVALID_CONTEXT;
  *d = tls_current->dev->ordinal;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSynchronize() {
  if (CUresult st = check_init()) return st;
  Context* c = current_context();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  c->synchronize();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (CUresult st = check_init()) return st;
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetApiVersion(CUcontext, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

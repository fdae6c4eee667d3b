// Communicator lifecycle: unique ids, init (rank / config / all / scalable), split,
// finalize, destroy, abort, queries, errors, PreMulSum operators.
#include "nccl/comm.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/driver_api.h"
#include "common/simgpu_env.h"
#include "nccl/group.h"
#include "nccl/reduce.h"

namespace simgpu::nccl {
namespace {

constexpr char kIdMagic[8] = {'S', 'I', 'M', 'N', 'C', 'C', 'L', '1'};

std::mutex g_err_mu;
char g_last_error[512] = "";

std::string id_name(const ncclUniqueId& id) {
  if (memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0) return {};
  return std::string(id.internal + 8, strnlen(id.internal + 8, sizeof id.internal - 8));
}

// Device of the calling thread's current context (what real NCCL gets from cudaGetDevice).
bool current_device(int* dev) {
  const DriverApi* d = driver_api();
  if (!d || d->cuInit(0) != CUDA_SUCCESS) return false;
  CUdevice cd = 0;
  *dev = d->cuCtxGetDevice(&cd) == CUDA_SUCCESS ? int(cd) : 0;
  return true;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

ncclResult_t create(ncclComm_t* out, int nranks, const std::string& name, int rank, int dev, bool wait) {
  if (!out) return ncclInvalidArgument;
  if (nranks < 1 || rank < 0 || rank >= nranks || name.empty()) {
    set_last_error("invalid communicator arguments: nranks %d rank %d", nranks, rank);
    return ncclInvalidArgument;
  }
  auto c = std::make_shared<ncclComm>();
  c->rank = rank;
  c->nranks = nranks;
  c->dev = dev;
  ncclResult_t err;
  c->seg = Segment::attach(name, nranks, rank, dev, &err);
  if (!c->seg) {
    set_last_error("cannot attach communicator segment %s", name.c_str());
    return err;
  }
  if (wait && !c->seg->wait_all_attached(c->local_abort)) return ncclRemoteError;
  c->init_pending = !wait;
  c->self = c;
  *out = c.get();
  log("nccl: rank %d/%d attached to %s", rank, nranks, name.c_str());
  return ncclSuccess;
}

}  // namespace

ncclComm* as_comm(ncclComm_t c) { return (c && c->magic == ncclComm::kMagic && c->self) ? c : nullptr; }

void set_last_error(const char* fmt, ...) {
  std::lock_guard lk(g_err_mu);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
}

ncclResult_t finish_init(ncclComm* c) {
  if (!c->init_pending.exchange(false)) return ncclSuccess;
  return c->seg->wait_all_attached(c->local_abort) ? ncclSuccess : ncclRemoteError;
}

}  // namespace simgpu::nccl

using namespace simgpu;
using namespace simgpu::nccl;

bool ncclComm::allgather_boot(const BootRecord& mine_rec, std::vector<BootRecord>* all) {
  const uint32_t round = ++boot_round;
  RankSlot* mine = seg->rank(rank);
  mine->boot[round % 2] = mine_rec;
  mine->boot_seq.store(round, std::memory_order_release);
  for (int r = 0; r < nranks; ++r) seg->ring(r);
  for (;;) {
    const uint32_t bell = mine->doorbell.load(std::memory_order_acquire);
    bool ready = true;
    for (int r = 0; r < nranks && ready; ++r) ready = seg->rank(r)->boot_seq.load(std::memory_order_acquire) >= round;
    if (ready) break;
    if (aborted()) return false;
    simnccl_wait_for_peers(&mine->doorbell, bell, 100);
  }
  all->resize(size_t(nranks));
  for (int r = 0; r < nranks; ++r) (*all)[size_t(r)] = seg->rank(r)->boot[round % 2];
  return true;
}

SIMNCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

// The id names a shared-memory segment; the ranks that use it create/open it on init.
SIMNCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  static std::atomic<uint32_t> counter{0};
  std::random_device rd;
  const uint64_t rnd = (uint64_t(rd()) << 32) ^ rd();
  memset(id, 0, sizeof *id);
  memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  snprintf(id->internal + 8, sizeof id->internal - 8, "/simgpu-nccl-%d-%u-%016llx", int(getpid()), counter.fetch_add(1),
           (unsigned long long)rnd);
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int dev = 0;
  if (!current_device(&dev)) {
    set_last_error("no CUDA device");
    return ncclUnhandledCudaError;
  }
  const std::string name = id_name(id);
  if (name.empty()) {
    set_last_error("invalid unique id");
    return ncclInvalidArgument;
  }
  // Inside ncclGroupStart/End the wait for the other ranks happens at ncclGroupEnd, so one
  // thread can initialise several ranks (ncclCommInitAll does exactly that).
  const bool grouped = group_depth() > 0;
  ncclResult_t r = create(comm, nranks, name, rank, dev, !grouped);
  if (r == ncclSuccess && grouped) group_add_init(*comm);
  return r;
}

SIMNCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                                   ncclConfig_t*) {
  // Non-blocking configs are served blocking: the call returns ncclSuccess once ready.
  return ncclCommInitRank(comm, nranks, id, rank);
}

SIMNCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId, ncclUniqueId* ids,
                                                     ncclConfig_t* config) {
  if (nId < 1 || !ids) return ncclInvalidArgument;
  return ncclCommInitRankConfig(comm, nranks, ids[0], rank, config);
}

SIMNCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return ncclInvalidArgument;
  int dummy = 0;
  if (!current_device(&dummy)) return ncclUnhandledCudaError;
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  const std::string name = id_name(id);
  for (int i = 0; i < ndev; ++i) {
    if (ncclResult_t r = create(&comms[i], ndev, name, i, devlist ? devlist[i] : i, false)) return r;
  }
  for (int i = 0; i < ndev; ++i)
    if (ncclResult_t r = finish_init(comms[i])) return r;
  return ncclSuccess;
}

// Collective over `comm`: all-gather (color, key), then each colour forms a communicator
// ordered by (key, old rank) on a segment whose name every member derives the same way.
SIMNCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  ncclComm* c = as_comm(comm);
  if (!c || !newcomm) return ncclInvalidArgument;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return ncclInvalidArgument;
  if (ncclResult_t r = finish_init(c)) return r;
  std::vector<BootRecord> all;
  if (!c->allgather_boot(BootRecord{color, key, 0}, &all)) return ncclRemoteError;
  const uint32_t split = c->split_count++;
  *newcomm = nullptr;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<std::pair<int, int>> members;  // (key, old rank)
  for (int r = 0; r < c->nranks; ++r)
    if (all[size_t(r)].color == color) members.emplace_back(all[size_t(r)].key, r);
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == c->rank) new_rank = int(i);
  // Keep the creator's pid from the parent's name so leftovers can be traced to their job.
  int pid = 0;
  sscanf(c->seg->name().c_str(), "/simgpu-nccl-%d", &pid);
  char name[96];
  snprintf(name, sizeof name, "/simgpu-nccl-%d-split-%016llx", pid,
           (unsigned long long)fnv1a(c->seg->name() + "/" + std::to_string(split) + "/" + std::to_string(color)));
  return create(newcomm, int(members.size()), name, new_rank, c->dev, true);
}

SIMNCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) {
  set_last_error("ncclCommShrink is not simulated");
  return ncclInvalidUsage;
}

// Waits for this rank's queued operations on the communicator (they may wait for peers).
SIMNCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclComm* c = as_comm(comm);
  if (!c) return ncclInvalidArgument;
  if (ncclResult_t r = finish_init(c)) return r;
  std::unique_lock lk(c->m);
  c->cv.wait(lk, [&] { return c->inflight == 0; });
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ncclComm* c = as_comm(comm);
  if (!c) return ncclInvalidArgument;
  if (!c->aborted()) ncclCommFinalize(comm);
  std::vector<Work*> persistent;
  {
    std::lock_guard lk(c->m);
    persistent.swap(c->persistent);
  }
  for (Work* w : persistent) delete w;
  c->seg->unlink();  // in case some rank never attached
  std::shared_ptr<ncclComm> hold = std::move(c->self);
  hold->magic = 0;
  return ncclSuccess;
}

// Unblocks this rank's waiting operations, and the peers' (they fail with ncclRemoteError).
SIMNCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ncclComm* c = as_comm(comm);
  if (!c) return ncclInvalidArgument;
  c->local_abort.store(true);
  c->seg->hdr()->aborted.store(1);
  for (int r = 0; r < c->nranks; ++r) c->seg->ring(r);
  futex_wake_all(&c->seg->hdr()->init_word);
  { std::lock_guard lk(c->m); }
  c->cv.notify_all();
  return ncclCommDestroy(comm);
}

SIMNCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  ncclComm* c = as_comm(comm);
  if (!c) return ncclInvalidArgument;
  c->local_abort.store(true);
  c->seg->hdr()->aborted.store(1);
  for (int r = 0; r < c->nranks; ++r) c->seg->ring(r);
  c->cv.notify_all();
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  ncclComm* c = as_comm(comm);
  if (!c || !err) return ncclInvalidArgument;
  *err = static_cast<ncclResult_t>(c->async_error.load());
  if (*err == ncclSuccess && !c->local_abort && c->seg->hdr()->aborted.load()) *err = ncclRemoteError;
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  ncclComm* c = as_comm(comm);
  if (!c || !count) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* dev) {
  ncclComm* c = as_comm(comm);
  if (!c || !dev) return ncclInvalidArgument;
  *dev = c->dev;
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclComm* c = as_comm(comm);
  if (!c || !rank) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

SIMNCCL_EXPORT const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

SIMNCCL_EXPORT const char* ncclGetLastError(ncclComm_t) {
  std::lock_guard lk(g_err_mu);
  static thread_local char copy[sizeof g_last_error];
  memcpy(copy, g_last_error, sizeof copy);
  return copy;
}

SIMNCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t, void** handle) {
  if (!as_comm(comm) || !handle) return ncclInvalidArgument;
  *handle = buff;
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) {
  return as_comm(comm) ? ncclSuccess : ncclInvalidArgument;
}

SIMNCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t, ncclWindow_t* win, int) {
  if (!as_comm(comm) || !win) return ncclInvalidArgument;
  *win = reinterpret_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t) {
  return as_comm(comm) ? ncclSuccess : ncclInvalidArgument;
}

SIMNCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  const DriverApi* d = driver_api();
  if (!ptr || !d) return ncclInvalidArgument;
  CUdeviceptr p = 0;
  if (d->cuMemAlloc_v2(&p, size) != CUDA_SUCCESS) return ncclUnhandledCudaError;
  *ptr = reinterpret_cast<void*>(p);
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  const DriverApi* d = driver_api();
  if (!d) return ncclInvalidArgument;
  return d->cuMemFree_v2(reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

SIMNCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                                     ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclComm* c = as_comm(comm);
  if (!c || !op || !scalar || !reducible(type)) return ncclInvalidArgument;
  PreMul pm;
  pm.live = true;
  pm.type = type;
  pm.device_resident = residence == ncclScalarDevice;
  pm.ptr = scalar;
  if (!pm.device_resident) memcpy(&pm.value, scalar, type_size(type));
  std::lock_guard lk(c->m);
  size_t i = 0;
  while (i < c->premul.size() && c->premul[i].live) ++i;
  if (i == c->premul.size()) c->premul.push_back(pm);
  else c->premul[i] = pm;
  *op = static_cast<ncclRedOp_t>(int(ncclNumOps) + int(i));
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  ncclComm* c = as_comm(comm);
  if (!c) return ncclInvalidArgument;
  std::lock_guard lk(c->m);
  const int i = int(op) - int(ncclNumOps);
  if (i < 0 || size_t(i) >= c->premul.size() || !c->premul[size_t(i)].live) return ncclInvalidArgument;
  c->premul[size_t(i)].live = false;
  return ncclSuccess;
}

#define SIMNCCL_ALIAS(name) SIMNCCL_EXPORT __typeof__(name) p##name __attribute__((alias(#name)));
SIMNCCL_ALIAS(ncclGetVersion)
SIMNCCL_ALIAS(ncclGetUniqueId)
SIMNCCL_ALIAS(ncclCommInitRank)
SIMNCCL_ALIAS(ncclCommInitRankConfig)
SIMNCCL_ALIAS(ncclCommInitRankScalable)
SIMNCCL_ALIAS(ncclCommInitAll)
SIMNCCL_ALIAS(ncclCommSplit)
SIMNCCL_ALIAS(ncclCommShrink)
SIMNCCL_ALIAS(ncclCommFinalize)
SIMNCCL_ALIAS(ncclCommDestroy)
SIMNCCL_ALIAS(ncclCommAbort)
SIMNCCL_ALIAS(ncclCommRevoke)
SIMNCCL_ALIAS(ncclCommGetAsyncError)
SIMNCCL_ALIAS(ncclCommCount)
SIMNCCL_ALIAS(ncclCommCuDevice)
SIMNCCL_ALIAS(ncclCommUserRank)
SIMNCCL_ALIAS(ncclGetErrorString)
SIMNCCL_ALIAS(ncclGetLastError)
SIMNCCL_ALIAS(ncclCommRegister)
SIMNCCL_ALIAS(ncclCommDeregister)
SIMNCCL_ALIAS(ncclCommWindowRegister)
SIMNCCL_ALIAS(ncclCommWindowDeregister)
SIMNCCL_ALIAS(ncclMemAlloc)
SIMNCCL_ALIAS(ncclMemFree)
SIMNCCL_ALIAS(ncclRedOpCreatePreMulSum)
SIMNCCL_ALIAS(ncclRedOpDestroy)

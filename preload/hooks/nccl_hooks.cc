// NCCL: communicator life cycle (to give every communicator an id all its ranks agree on),
// every collective and point-to-point call (timed on its stream, numbered per communicator),
// and group semantics: calls between ncclGroupStart and ncclGroupEnd are launched by
// ncclGroupEnd, so that is where their events are recorded.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "preload/base/real_function.h"
#include "preload/hang/blocked_threads.h"
#include "preload/hooks/timed_call.h"
#include "preload/timing/call_sites.h"
#include "preload/timing/op_names.h"

namespace xtimer {
namespace {

#define XTIMER_REAL_NCCL(fn) RealFunction<decltype(&::fn)> real_##fn(#fn, Lib::kNccl)
XTIMER_REAL_NCCL(ncclCommCount);
XTIMER_REAL_NCCL(ncclCommUserRank);
XTIMER_REAL_NCCL(ncclCommCuDevice);
XTIMER_REAL(kCudart, cudaGetDevice);

// ---------------------------------------------------------------- communicators

int DeviceOf(ncclComm_t comm) {
  int dev = -1;
  if (auto f = real_ncclCommCuDevice.get(); f && f(comm, &dev) == ncclSuccess) return dev;
  if (auto f = real_cudaGetDevice.get(); f && f(&dev) == cudaSuccess) return dev;
  return -1;
}

// Rank and size from NCCL itself (a communicator made without us knowing them).
void AskRankAndSize(ncclComm_t comm, int* rank, int* size) {
  if (auto f = real_ncclCommUserRank.get(); f == nullptr || f(comm, rank) != ncclSuccess) *rank = -1;
  if (auto f = real_ncclCommCount.get(); f == nullptr || f(comm, size) != ncclSuccess) *size = 0;
}

void RegisterComm(ncclComm_t comm, const void* key, size_t key_len, int rank, int size) {
  Tracker* t = Tracker::Instance();
  if (t == nullptr || comm == nullptr) return;
  if (rank < 0 || size <= 0) AskRankAndSize(comm, &rank, &size);
  t->comms().Register(comm, key, key_len, rank, size, DeviceOf(comm));
}

// The slot of `comm`, registering a communicator we did not see created (local id).
int CommSlot(Tracker* t, ncclComm_t comm) {
  int slot = t->comms().Find(comm);
  if (slot >= 0 || comm == nullptr) return slot;
  struct {
    pid_t pid;
    const void* handle;
  } key{getpid(), comm};
  int rank, size;
  AskRankAndSize(comm, &rank, &size);
  return t->comms().Register(comm, &key, sizeof key, rank, size, DeviceOf(comm));
}

// Key of a communicator derived from a parent: every rank of the parent derives the same.
struct DerivedKey {
  char parent[9];
  uint64_t nth;
  int color;
  int kind;  // 0 split, 1 shrink
};

DerivedKey DeriveKey(ncclComm_t parent, int color, int kind) {
  DerivedKey k{};
  if (Tracker* t = Tracker::Instance()) {
    int slot = CommSlot(t, parent);
    if (slot >= 0) {
      Comm& c = t->comms().at(slot);
      std::memcpy(k.parent, c.id, sizeof k.parent);
      k.nth = c.split_count.fetch_add(1, std::memory_order_relaxed);
    }
  }
  k.color = color;
  k.kind = kind;
  return k;
}

// ---------------------------------------------------------------- operations

struct NcclOp {
  const char* api;
  OpKind kind;
  ncclComm_t comm;
  cudaStream_t stream;
  uint64_t bytes;  // nccl-tests "size" of the op
  int dtype;
  int peer;  // p2p only
  // The fingerprint's rest (collectives): elements as passed to NCCL, reduction, root; -1: none.
  uint64_t count = 0;
  int redop = -1;
  int root = -1;
};

// Calls made inside a group, waiting for ncclGroupEnd. Heap-allocated on a thread's first group.
struct GroupState {
  int depth = 0;
  std::vector<NcclOp> ops;
};
thread_local GroupState* t_group = nullptr;

GroupState& Group() {
  if (t_group == nullptr) t_group = new GroupState();  // one per thread that uses groups
  return *t_group;
}

// Number the op on its communicator; fills rec's NCCL fields.
void Number(Tracker* t, const NcclOp& op, OpRecord* rec) {
  rec->bytes = op.bytes;
  rec->comm = static_cast<int16_t>(CommSlot(t, op.comm));
  rec->peer = op.kind == OpKind::kP2p ? op.peer : -1;
  if (rec->comm < 0) return;
  Comm& c = t->comms().at(rec->comm);
  if (op.kind == OpKind::kCollective) {
    rec->seq = c.collective_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    t->comms().RecordPrint(rec->comm, rec->seq, op.api, op.count, op.dtype, op.redop, op.root, sites::Current());
  } else if (op.peer >= 0 && op.peer < c.size && c.p2p_seq) {
    rec->seq = c.p2p_seq[op.peer].fetch_add(1, std::memory_order_relaxed) + 1;
  }
}

OpKey KeyOf(const NcclOp& op, int comm_slot, int group_size) {
  OpKey key;
  key.kind = op.kind;
  key.api = op.api;
  key.a = static_cast<int64_t>(op.bytes);
  key.b = op.dtype;
  key.c = comm_slot;
  key.d = group_size;
  return key;
}

template <typename Fn, typename Call>
ncclResult_t Operation(RealFunction<Fn>& real, const NcclOp& op, Call&& call) {
  HookEntry<Fn> hook(real);
  Fn fn = hook.fn;
  Tracker* t = hook.tracker;
  if (fn == nullptr) return ncclSystemError;
  if (t == nullptr) return call(fn);
  if (t_group != nullptr && t_group->depth > 0) {
    // Launched at ncclGroupEnd; remember it.
    t_group->ops.push_back(op);
    return call(fn);
  }
  OpRecord rec;
  Number(t, op, &rec);
  uint32_t cls = t->Intern(KeyOf(op, rec.comm, 1));
  int device = rec.comm >= 0 ? t->comms().at(rec.comm).device : -1;
  OpPlace where{op.stream, gpu::Path::kRuntime, false, device};
  return TimedCall<ncclResult_t>(t, cls, where, rec, [&] { return call(fn); });
}

int CommSize(ncclComm_t comm) {
  Tracker* t = Tracker::Instance();
  if (t == nullptr) return 1;
  int slot = CommSlot(t, comm);
  return slot >= 0 && t->comms().at(slot).size > 0 ? t->comms().at(slot).size : 1;
}

uint64_t Bytes(size_t count, ncclDataType_t type) { return static_cast<uint64_t>(count) * NcclTypeSize(type); }

// ncclGroupEnd of the outermost group: one record per stream. A stream with several ops gets
// one record for all of them (they run as one fused launch): the class is the common API (or
// "ncclGroup"), bytes are summed, and the ops are numbered individually.
ncclResult_t GroupEnd(decltype(&::ncclGroupEnd) fn) {
  GroupState& g = Group();
  std::vector<NcclOp> ops;
  ops.swap(g.ops);
  HookGuard guard;
  Tracker* t = Tracker::Instance();
  if (t == nullptr || ops.empty()) return fn();

  struct StreamBatch {
    OpTicket ticket;
    NcclOp first;
    int count = 0;
    bool mixed = false, any_collective = false;
    uint64_t bytes = 0;
  };
  std::vector<StreamBatch> batches;
  for (const NcclOp& op : ops) {
    StreamBatch* b = nullptr;
    for (auto& x : batches)
      if (x.first.stream == op.stream) b = &x;
    OpRecord rec;
    Number(t, op, &rec);
    if (b == nullptr) {
      batches.push_back(StreamBatch{});
      b = &batches.back();
      b->first = op;
      b->ticket.rec = rec;
    }
    b->count++;
    b->bytes += op.bytes;
    b->mixed |= std::strcmp(op.api, b->first.api) != 0;
    b->any_collective |= op.kind == OpKind::kCollective;
  }
  for (StreamBatch& b : batches) {
    NcclOp head = b.first;
    if (b.mixed) head.api = "ncclGroup";
    head.kind = b.any_collective ? OpKind::kCollective : OpKind::kP2p;
    head.bytes = b.bytes;
    OpRecord rec = b.ticket.rec;
    rec.bytes = b.bytes;
    rec.group_size = static_cast<uint32_t>(b.count);
    uint32_t cls = t->Intern(KeyOf(head, rec.comm, b.count));
    int device = rec.comm >= 0 ? t->comms().at(rec.comm).device : -1;
    if (StreamIsCapturing(head.stream, gpu::Path::kRuntime, false)) continue;
    b.ticket.rec = rec;
    t->Begin(cls, head.stream, gpu::Path::kRuntime, false, device, &b.ticket);
  }
  ncclResult_t r = fn();
  bool ok = r == ncclSuccess || r == ncclInProgress;
  for (StreamBatch& b : batches) t->End(&b.ticket, ok);
  t->AfterRealCall();
  return r;
}

XTIMER_REAL_NCCL(ncclGroupStart);
XTIMER_REAL_NCCL(ncclGroupEnd);
XTIMER_REAL_NCCL(ncclCommInitRank);
XTIMER_REAL_NCCL(ncclCommInitRankConfig);
XTIMER_REAL_NCCL(ncclCommInitAll);
XTIMER_REAL_NCCL(ncclCommInitRankScalable);
XTIMER_REAL_NCCL(ncclCommSplit);
XTIMER_REAL_NCCL(ncclCommShrink);
XTIMER_REAL_NCCL(ncclCommDestroy);
XTIMER_REAL_NCCL(ncclCommAbort);
XTIMER_REAL_NCCL(ncclAllReduce);
XTIMER_REAL_NCCL(ncclBroadcast);
XTIMER_REAL_NCCL(ncclBcast);
XTIMER_REAL_NCCL(ncclReduce);
XTIMER_REAL_NCCL(ncclAllGather);
XTIMER_REAL_NCCL(ncclReduceScatter);
XTIMER_REAL_NCCL(ncclAlltoAll);
XTIMER_REAL_NCCL(ncclGather);
XTIMER_REAL_NCCL(ncclScatter);
XTIMER_REAL_NCCL(ncclSend);
XTIMER_REAL_NCCL(ncclRecv);

// Communicator set-up returns only when every rank of the communicator has arrived: a rank that
// never comes (stuck loading data, or in the rendezvous) leaves the others here, which the
// watchdog treats like a blocked sync. The first NCCL call may be this one: it starts the tracker.
BlockedThreads::Scope CommSetUp(const char* name) {
  Tracker::Instance();
  return BlockedThreads::Scope(name, OpKind::kCommInit);
}

}  // namespace
}  // namespace xtimer

using namespace xtimer;

// ---------------------------------------------------------------- life cycle

XTIMER_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  auto fn = real_ncclCommInitRank.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  ncclResult_t r;
  {
    BlockedThreads::Scope waiting = CommSetUp("ncclCommInitRank");
    r = fn(comm, nranks, id, rank);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && comm) RegisterComm(*comm, &id, sizeof id, rank, nranks);
  return r;
}

XTIMER_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                                  ncclConfig_t* config) {
  auto fn = real_ncclCommInitRankConfig.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  ncclResult_t r;
  {
    BlockedThreads::Scope waiting = CommSetUp("ncclCommInitRankConfig");
    r = fn(comm, nranks, id, rank, config);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && comm) RegisterComm(*comm, &id, sizeof id, rank, nranks);
  return r;
}

XTIMER_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int n_ids,
                                                    ncclUniqueId* ids, ncclConfig_t* config) {
  auto fn = real_ncclCommInitRankScalable.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  ncclResult_t r;
  {
    BlockedThreads::Scope waiting = CommSetUp("ncclCommInitRankScalable");
    r = fn(comm, nranks, rank, n_ids, ids, config);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && comm && ids && n_ids > 0)
    RegisterComm(*comm, &ids[0], sizeof ids[0], rank, nranks);
  return r;
}

XTIMER_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  auto fn = real_ncclCommInitAll.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  ncclResult_t r;
  {
    BlockedThreads::Scope waiting = CommSetUp("ncclCommInitAll");
    r = fn(comms, ndev, devlist);
  }
  if (r == ncclSuccess && comms) {
    // All ranks live in this process: any key shared by them will do.
    static std::atomic<uint64_t> calls{0};
    struct {
      pid_t pid;
      uint64_t nth;
    } key{getpid(), calls.fetch_add(1)};
    for (int i = 0; i < ndev; ++i) RegisterComm(comms[i], &key, sizeof key, i, ndev);
  }
  return r;
}

XTIMER_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                         ncclConfig_t* config) {
  auto fn = real_ncclCommSplit.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  DerivedKey k = DeriveKey(comm, color, 0);
  ncclResult_t r;
  {
    BlockedThreads::Scope waiting = CommSetUp("ncclCommSplit");
    r = fn(comm, color, key, newcomm, config);
  }
  if ((r == ncclSuccess || r == ncclInProgress) && newcomm && *newcomm && color != NCCL_SPLIT_NOCOLOR)
    RegisterComm(*newcomm, &k, sizeof k, -1, 0);
  return r;
}

XTIMER_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int n_exclude, ncclComm_t* newcomm,
                                          ncclConfig_t* config, int flags) {
  auto fn = real_ncclCommShrink.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  DerivedKey k = DeriveKey(comm, n_exclude, 1);
  ncclResult_t r = fn(comm, exclude, n_exclude, newcomm, config, flags);
  if ((r == ncclSuccess || r == ncclInProgress) && newcomm && *newcomm) RegisterComm(*newcomm, &k, sizeof k, -1, 0);
  return r;
}

XTIMER_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  auto fn = real_ncclCommDestroy.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  if (Tracker* t = Tracker::Instance()) t->comms().Forget(comm);
  return fn(comm);
}

XTIMER_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  auto fn = real_ncclCommAbort.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  if (Tracker* t = Tracker::Instance()) t->comms().Forget(comm);
  return fn(comm);
}

// ---------------------------------------------------------------- groups

XTIMER_EXPORT ncclResult_t ncclGroupStart() {
  auto fn = real_ncclGroupStart.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  Group().depth++;
  return fn();
}

XTIMER_EXPORT ncclResult_t ncclGroupEnd() {
  auto fn = real_ncclGroupEnd.get_or_report();
  if (fn == nullptr) return ncclSystemError;
  GroupState& g = Group();
  if (g.depth > 0) g.depth--;
  if (g.depth > 0 || InsideHook()) return fn();
  return GroupEnd(fn);
}

// ---------------------------------------------------------------- collectives and p2p

XTIMER_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclAllReduce", OpKind::kCollective, comm, stream, Bytes(count, type), type, -1, count, op};
  return Operation(real_ncclAllReduce, o, [&](auto f) { return f(send, recv, count, type, op, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                         ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclBroadcast", OpKind::kCollective, comm, stream, Bytes(count, type), type, -1, count, -1, root};
  return Operation(real_ncclBroadcast, o, [&](auto f) { return f(send, recv, count, type, root, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  NcclOp o{"ncclBroadcast", OpKind::kCollective, comm, stream, Bytes(count, type), type, -1, count, -1, root};
  return Operation(real_ncclBcast, o, [&](auto f) { return f(buff, count, type, root, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                      int root, ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclReduce", OpKind::kCollective, comm, stream, Bytes(count, type), type, -1, count, op, root};
  return Operation(real_ncclReduce, o, [&](auto f) { return f(send, recv, count, type, op, root, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type,
                                         ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclAllGather", OpKind::kCollective, comm, stream, Bytes(sendcount, type) * CommSize(comm), type, -1,
           sendcount};
  return Operation(real_ncclAllGather, o, [&](auto f) { return f(send, recv, sendcount, type, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type,
                                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclReduceScatter",
           OpKind::kCollective,
           comm,
           stream,
           Bytes(recvcount, type) * CommSize(comm),
           type,
           -1,
           recvcount,
           op};
  return Operation(real_ncclReduceScatter, o, [&](auto f) { return f(send, recv, recvcount, type, op, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t type,
                                        ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclAlltoAll", OpKind::kCollective, comm, stream, Bytes(count, type) * CommSize(comm), type, -1, count};
  return Operation(real_ncclAlltoAll, o, [&](auto f) { return f(send, recv, count, type, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                      ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclGather", OpKind::kCollective, comm, stream, Bytes(count, type) * CommSize(comm), type, -1, count, -1,
           root};
  return Operation(real_ncclGather, o, [&](auto f) { return f(send, recv, count, type, root, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                       ncclComm_t comm, cudaStream_t stream) {
  NcclOp o{"ncclScatter", OpKind::kCollective, comm, stream, Bytes(count, type) * CommSize(comm), type, -1, count, -1,
           root};
  return Operation(real_ncclScatter, o, [&](auto f) { return f(send, recv, count, type, root, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                    cudaStream_t stream) {
  NcclOp o{"ncclSend", OpKind::kP2p, comm, stream, Bytes(count, type), type, peer};
  return Operation(real_ncclSend, o, [&](auto f) { return f(send, count, type, peer, comm, stream); });
}

XTIMER_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                    cudaStream_t stream) {
  NcclOp o{"ncclRecv", OpKind::kP2p, comm, stream, Bytes(count, type), type, peer};
  return Operation(real_ncclRecv, o, [&](auto f) { return f(recv, count, type, peer, comm, stream); });
}

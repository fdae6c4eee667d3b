// Collectives, point-to-point and groups. Calls only enqueue: at the end of the (implicit)
// group, each (communicator, stream) pair gets one kernel launched through the driver's
// cuLaunchKernel (as NCCL >= 2.22 does via cuGetProcAddress); the kernel moves the data
// when the stream reaches it and waits for the peers there.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/driver_api.h"
#include "common/simgpu_env.h"
#include "nccl/comm.h"
#include "nccl/group.h"
#include "nccl/reduce.h"

using namespace simgpu;
using namespace simgpu::nccl;

// Device-kernel stand-ins, named like NCCL's, each with its parameter table so the driver
// copies the Work pointer at launch.
#define SIMNCCL_KERNEL(name)                                                           \
  extern "C" __attribute__((visibility("default"), noinline)) void name(void** args) { \
    run_work(*static_cast<Work**>(args[0]));                                           \
  }                                                                                    \
  extern "C" __attribute__((visibility("default"))) const size_t simgpu_params_##name[] = {sizeof(void*), 0};

SIMNCCL_KERNEL(ncclDevKernel_AllReduce_RING_LL)
SIMNCCL_KERNEL(ncclDevKernel_AllGather_RING_LL)
SIMNCCL_KERNEL(ncclDevKernel_ReduceScatter_RING_LL)
SIMNCCL_KERNEL(ncclDevKernel_Broadcast_RING_LL)
SIMNCCL_KERNEL(ncclDevKernel_Reduce_RING_LL)
SIMNCCL_KERNEL(ncclDevKernel_SendRecv)
SIMNCCL_KERNEL(ncclDevKernel_Generic)

namespace simgpu::nccl {
namespace {

struct Pending {
  std::shared_ptr<ncclComm> comm;
  cudaStream_t stream;
  OpDesc op;
};

struct GroupState {
  int depth = 0;
  std::vector<Pending> ops;
  std::vector<ncclComm_t> inits;
  ncclResult_t error = ncclSuccess;
};
thread_local GroupState tls_group;

void (*kernel_for(const std::vector<OpDesc>& ops))(void**) {
  Kind k = ops.front().kind;
  const bool same = std::all_of(ops.begin(), ops.end(), [&](const OpDesc& o) { return o.kind == k; });
  const bool p2p = std::all_of(ops.begin(), ops.end(), [](const OpDesc& o) {
    return o.kind == Kind::Send || o.kind == Kind::Recv || o.kind == Kind::AlltoAll || o.kind == Kind::Gather ||
           o.kind == Kind::Scatter;
  });
  if (p2p) return ncclDevKernel_SendRecv;
  if (!same) return ncclDevKernel_Generic;
  switch (k) {
    case Kind::AllReduce: return ncclDevKernel_AllReduce_RING_LL;
    case Kind::AllGather: return ncclDevKernel_AllGather_RING_LL;
    case Kind::ReduceScatter: return ncclDevKernel_ReduceScatter_RING_LL;
    case Kind::Broadcast: return ncclDevKernel_Broadcast_RING_LL;
    case Kind::Reduce: return ncclDevKernel_Reduce_RING_LL;
    default: return ncclDevKernel_Generic;
  }
}

ncclResult_t launch(const std::shared_ptr<ncclComm>& c, cudaStream_t stream, std::vector<OpDesc> ops) {
  const DriverApi* d = driver_api();
  if (!d) return ncclUnhandledCudaError;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  d->cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &capture);
  auto* w = new Work{c, std::move(ops), 0, capture == CU_STREAM_CAPTURE_STATUS_ACTIVE};
  void (*kernel)(void**) = kernel_for(w->ops);
  void* args[] = {&w};
  std::lock_guard lk(c->m);  // issue order == launch order
  if (w->persistent) {
    c->persistent.push_back(w);  // replayed by every graph launch; freed by ncclCommDestroy
  } else {
    w->seq = ++c->next_seq;
    ++c->inflight;
  }
  // One block of 512 threads per channel, like a small NCCL launch.
  CUresult r = d->cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 1, 1, 1, 512, 1, 1, 0,
                                 reinterpret_cast<CUstream>(stream), args, nullptr);
  if (r != CUDA_SUCCESS) {
    if (w->persistent) {
      c->persistent.pop_back();
    } else {
      --c->next_seq;
      --c->inflight;
    }
    delete w;
    set_last_error("cuLaunchKernel failed: %d", int(r));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

ncclResult_t flush() {
  GroupState& g = tls_group;
  std::vector<ncclComm_t> inits;
  inits.swap(g.inits);
  std::vector<Pending> ops;
  ops.swap(g.ops);
  ncclResult_t result = g.error;
  g.error = ncclSuccess;
  for (ncclComm_t c : inits)
    if (ncclResult_t r = finish_init(c); r != ncclSuccess && result == ncclSuccess) result = r;
  if (result != ncclSuccess) return result;
  // One kernel per (communicator, stream), in first-use order; ops keep their call order.
  std::vector<bool> taken(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (taken[i]) continue;
    std::vector<OpDesc> batch;
    for (size_t j = i; j < ops.size(); ++j) {
      if (!taken[j] && ops[j].comm == ops[i].comm && ops[j].stream == ops[i].stream) {
        batch.push_back(ops[j].op);
        taken[j] = true;
      }
    }
    if (ncclResult_t r = launch(ops[i].comm, ops[i].stream, std::move(batch)); r != ncclSuccess) result = r;
  }
  return result;
}

ncclResult_t enqueue(ncclComm_t comm, cudaStream_t stream, const OpDesc& op) {
  ncclComm* c = as_comm(comm);
  if (!c) {
    set_last_error("invalid communicator");
    return ncclInvalidArgument;
  }
  const bool rooted = op.kind == Kind::Broadcast || op.kind == Kind::Reduce || op.kind == Kind::Gather ||
                      op.kind == Kind::Scatter || op.kind == Kind::Send || op.kind == Kind::Recv;
  if (type_size(op.type) == 0 || (rooted && (op.peer < 0 || op.peer >= c->nranks))) {
    set_last_error("invalid datatype %d or root/peer %d", int(op.type), op.peer);
    return ncclInvalidArgument;
  }
  const bool reduces = op.kind == Kind::AllReduce || op.kind == Kind::Reduce || op.kind == Kind::ReduceScatter;
  if (reduces) {
    const int o = int(op.op);
    const bool premul = o >= int(ncclNumOps) && size_t(o - ncclNumOps) < c->premul.size() &&
                        c->premul[size_t(o - ncclNumOps)].live && c->premul[size_t(o - ncclNumOps)].type == op.type;
    if (!reducible(op.type) || (o < 0 || (o >= int(ncclNumOps) && !premul))) {
      set_last_error("unsupported reduction %d on datatype %d", o, int(op.type));
      return ncclInvalidArgument;
    }
  }
  if (op.count && ((op.kind != Kind::Recv && !op.send && !(op.kind == Kind::Broadcast && c->rank != op.peer) &&
                    !(op.kind == Kind::Scatter && c->rank != op.peer)) ||
                   (op.kind != Kind::Send && !op.recv && !(op.kind == Kind::Reduce && c->rank != op.peer) &&
                    !(op.kind == Kind::Gather && c->rank != op.peer)))) {
    set_last_error("null buffer");
    return ncclInvalidArgument;
  }
  if (c->aborted()) {
    set_last_error("communicator was aborted");
    return ncclInvalidUsage;
  }
  if (op.count == 0) return ncclSuccess;
  GroupState& g = tls_group;
  g.ops.push_back(Pending{c->shared_from_this(), stream, op});
  return g.depth > 0 ? ncclSuccess : flush();
}

}  // namespace

int group_depth() { return tls_group.depth; }
void group_add_init(ncclComm_t c) { tls_group.inits.push_back(c); }

void run_work(Work* w) {
  ncclComm& c = *w->comm;
  if (w->seq) {  // operations on a communicator run in issue order, whatever their stream
    std::unique_lock lk(c.m);
    c.cv.wait(lk, [&] { return c.done_seq + 1 >= w->seq || c.aborted(); });
  }
  ncclResult_t r = execute(c, w->ops);
  if (r != ncclSuccess) {
    int expected = ncclSuccess;
    c.async_error.compare_exchange_strong(expected, r);
  }
  if (w->persistent) return;
  {
    std::lock_guard lk(c.m);
    c.done_seq = std::max(c.done_seq, w->seq);
    --c.inflight;
  }
  c.cv.notify_all();
  delete w;
}

}  // namespace simgpu::nccl

SIMNCCL_EXPORT ncclResult_t ncclGroupStart() {
  ++tls_group.depth;
  return ncclSuccess;
}

SIMNCCL_EXPORT ncclResult_t ncclGroupEnd() {
  GroupState& g = tls_group;
  if (g.depth == 0) {
    set_last_error("ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  return --g.depth > 0 ? ncclSuccess : flush();
}

SIMNCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  GroupState& g = tls_group;
  if (g.depth == 0) return ncclInvalidUsage;
  if (info) info->estimatedTime = 0.0f;
  if (--g.depth == 0) {  // simulate only: nothing is launched
    g.ops.clear();
    g.error = ncclSuccess;
  }
  return ncclSuccess;
}

namespace {

ncclResult_t op(Kind k, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o, int peer,
                ncclComm_t comm, cudaStream_t s) {
  ncclResult_t r = enqueue(comm, s, OpDesc{k, send, recv, count, t, o, peer});
  if (r != ncclSuccess && tls_group.depth > 0 && tls_group.error == ncclSuccess) tls_group.error = r;
  return r;
}

}  // namespace

SIMNCCL_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o,
                                          ncclComm_t comm, cudaStream_t s) {
  return op(Kind::AllReduce, send, recv, count, t, o, 0, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o,
                                       int root, ncclComm_t comm, cudaStream_t s) {
  return op(Kind::Reduce, send, recv, count, t, o, root, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                          ncclComm_t comm, cudaStream_t s) {
  return op(Kind::Broadcast, send, recv, count, t, ncclSum, root, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                                      cudaStream_t s) {
  return op(Kind::Broadcast, buff, buff, count, t, ncclSum, root, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t,
                                              ncclRedOp_t o, ncclComm_t comm, cudaStream_t s) {
  return op(Kind::ReduceScatter, send, recv, recvcount, t, o, 0, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t,
                                          ncclComm_t comm, cudaStream_t s) {
  return op(Kind::AllGather, send, recv, sendcount, t, ncclSum, 0, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                         cudaStream_t s) {
  return op(Kind::AlltoAll, send, recv, count, t, ncclSum, 0, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                       ncclComm_t comm, cudaStream_t s) {
  return op(Kind::Gather, send, recv, count, t, ncclSum, root, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                        ncclComm_t comm, cudaStream_t s) {
  return op(Kind::Scatter, send, recv, count, t, ncclSum, root, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                     cudaStream_t s) {
  return op(Kind::Send, send, nullptr, count, t, ncclSum, peer, comm, s);
}

SIMNCCL_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                     cudaStream_t s) {
  return op(Kind::Recv, nullptr, recv, count, t, ncclSum, peer, comm, s);
}

#define SIMNCCL_ALIAS(name) SIMNCCL_EXPORT __typeof__(name) p##name __attribute__((alias(#name)));
SIMNCCL_ALIAS(ncclGroupStart)
SIMNCCL_ALIAS(ncclGroupEnd)
SIMNCCL_ALIAS(ncclGroupSimulateEnd)
SIMNCCL_ALIAS(ncclAllReduce)
SIMNCCL_ALIAS(ncclReduce)
SIMNCCL_ALIAS(ncclBroadcast)
SIMNCCL_ALIAS(ncclBcast)
SIMNCCL_ALIAS(ncclReduceScatter)
SIMNCCL_ALIAS(ncclAllGather)
SIMNCCL_ALIAS(ncclAlltoAll)
SIMNCCL_ALIAS(ncclGather)
SIMNCCL_ALIAS(ncclScatter)
SIMNCCL_ALIAS(ncclSend)
SIMNCCL_ALIAS(ncclRecv)

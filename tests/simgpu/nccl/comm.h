// Communicators and queued work of the simulated NCCL (libnccl.so.2).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nccl.h>

#include "nccl/shm.h"

#define SIMNCCL_EXPORT extern "C" __attribute__((visibility("default")))

struct ncclComm;

namespace simgpu::nccl {

enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, Send, Recv };

struct OpDesc {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int peer;  // root of rooted collectives, peer of send/recv
};

// A ncclRedOpCreatePreMulSum operator.
struct PreMul {
  bool live = false;
  ncclDataType_t type{};
  bool device_resident = false;
  const void* ptr = nullptr;  // device-resident scalar, read when the op runs
  uint64_t value = 0;         // host-resident scalar, copied at creation
  const void* scalar() const { return device_resident ? ptr : &value; }
};

// The operations one group (or one ungrouped call) puts on one stream for one communicator;
// run by the kernel the simulated NCCL launches through the driver.
struct Work {
  std::shared_ptr<ncclComm> comm;
  std::vector<OpDesc> ops;
  uint64_t seq = 0;  // per-communicator issue order; 0 for captured (replayable) work
  bool persistent = false;
};

}  // namespace simgpu::nccl

struct ncclComm : std::enable_shared_from_this<ncclComm> {
  static constexpr uint32_t kMagic = 0x4e43434c;
  uint32_t magic = kMagic;
  int rank = 0;
  int nranks = 0;
  int dev = 0;
  std::unique_ptr<simgpu::nccl::Segment> seg;
  std::atomic<bool> local_abort{false};
  std::atomic<int> async_error{ncclSuccess};
  std::atomic<bool> init_pending{false};

  std::mutex m;
  std::condition_variable cv;  // inflight / turn changes
  int inflight = 0;
  uint64_t next_seq = 0;
  uint64_t done_seq = 0;
  std::vector<simgpu::nccl::Work*> persistent;
  std::vector<simgpu::nccl::PreMul> premul;
  uint32_t split_count = 0;
  uint32_t boot_round = 0;
  std::shared_ptr<ncclComm> self;  // the handle's ownership

  bool aborted() const { return local_abort.load() || (seg && seg->hdr()->aborted.load()); }
  // Bootstrap all-gather of one small record per rank (used by ncclCommSplit). Blocking.
  bool allgather_boot(const simgpu::nccl::BootRecord& mine, std::vector<simgpu::nccl::BootRecord>* all);
};

namespace simgpu::nccl {

ncclComm* as_comm(ncclComm_t c);
void set_last_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Runs a group's operations for one communicator: the body of the NCCL kernel.
ncclResult_t execute(ncclComm& c, const std::vector<OpDesc>& ops);
// Runs (on the stream worker) the queued work, then releases it.
void run_work(Work* w);

}  // namespace simgpu::nccl

// The cross-process transport of the simulated NCCL: one POSIX shared-memory segment per
// communicator, named by the unique id. It holds per-rank doorbells (futex words), a
// bootstrap area for small all-gathers, and a two-slot channel for every ordered pair of
// ranks. Data areas are sized for all pairs but tmpfs only backs pages that are touched.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <nccl.h>

namespace simgpu::nccl {

struct BootRecord {
  int32_t color;
  int32_t key;
  uint64_t value;
};

struct alignas(64) RankSlot {
  std::atomic<uint32_t> doorbell;  // bumped (and futex-woken) whenever a peer may have made progress for us
  std::atomic<uint32_t> boot_seq;  // bootstrap rounds this rank has published
  int32_t pid;
  int32_t dev;
  BootRecord boot[2];
  std::atomic<uint32_t> net_mbps;  // this rank's network rate in MB/s for its current op; 0 = unlimited
};

// What a filled slot carries besides its bytes.
struct SlotMeta {
  uint64_t msg_bytes;  // size of the whole message this chunk belongs to
  uint64_t offset;     // offset of this chunk in it
  uint32_t len;
  uint32_t pad;
  int64_t t_start;  // sender's op start (CLOCK_MONOTONIC ns), for SIMGPU_NET_GBPS
};

// src -> dst FIFO of chunks: src advances `posted`, dst advances `acked`; slot = seq % 2.
struct alignas(64) Channel {
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> acked;
  SlotMeta meta[2];
};

struct Header {
  std::atomic<uint64_t> magic;  // stored last by the creator
  uint32_t version;
  uint32_t nranks;
  uint64_t chunk;
  uint64_t total_size;
  uint64_t ranks_off;
  uint64_t channels_off;
  uint64_t data_off;
  std::atomic<uint32_t> attached;   // ranks that have attached
  std::atomic<uint32_t> init_word;  // futex word bumped on every attach
  std::atomic<uint32_t> aborted;    // some rank aborted the communicator
};

class Segment {
 public:
  // Creates or opens the segment and registers `rank`; does not wait for the others.
  static std::unique_ptr<Segment> attach(const std::string& name, int nranks, int rank, int dev, ncclResult_t* err);
  ~Segment();

  // Blocks (futex) until every rank has attached; false if the communicator was aborted.
  bool wait_all_attached(const std::atomic<bool>& local_abort);
  void unlink();

  Header* hdr() const { return hdr_; }
  RankSlot* rank(int r) const { return reinterpret_cast<RankSlot*>(base_ + hdr_->ranks_off) + r; }
  Channel* channel(int src, int dst) const {
    return reinterpret_cast<Channel*>(base_ + hdr_->channels_off) + (size_t(src) * nranks_ + dst);
  }
  char* slot_data(int src, int dst, int slot) const {
    return base_ + hdr_->data_off + ((size_t(src) * nranks_ + dst) * 2 + size_t(slot)) * hdr_->chunk;
  }
  int nranks() const { return nranks_; }
  uint64_t chunk() const { return hdr_->chunk; }
  const std::string& name() const { return name_; }
  // Bumps r's doorbell and wakes whoever sleeps on it.
  void ring(int r) const;

 private:
  Segment() = default;
  std::string name_;
  char* base_ = nullptr;
  size_t size_ = 0;
  Header* hdr_ = nullptr;
  int nranks_ = 0;
};

void futex_wake_all(std::atomic<uint32_t>* word);

}  // namespace simgpu::nccl

// THE NCCL wait: blocks in FUTEX_WAIT on a shared word until it changes from `seen` or
// `timeout_ms` passes. Every place where a rank waits for its peers goes through here, so
// a hung collective shows this frame (and a futex syscall) in native stacks.
extern "C" int simnccl_wait_for_peers(std::atomic<uint32_t>* word, uint32_t seen, int timeout_ms);

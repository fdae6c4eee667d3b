// NCCL communicators the process created, found by handle on the launch path without locks.
// Each gets an id that every rank of the communicator computes identically (from the unique
// id, or from the parent's id and the split colour), so stack files of different ranks can be
// compared: in-flight collectives carry (comm id, sequence number).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace xtimer {

// One collective call as every rank of the communicator must make it (the fingerprint compared
// by the node agent, common/desync/matcher.h). Written on the launch path by the hook that
// numbers the call: relaxed atomic stores, the sequence number last (release). A slot is read
// as valid when its sequence number, read before and after the fields, is the one expected.
struct CallPrint {
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> count{0};
  std::atomic<const char*> api{nullptr};  // "ncclAllReduce" (a string literal)
  std::atomic<int32_t> dtype{-1}, redop{-1}, root{-1};
  std::atomic<uint32_t> site{0};  // call_sites.h id; 0: unknown
};

// A fingerprint as the reader takes it out of the ring.
struct CallPrintCopy {
  int comm_slot = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  const char* api = nullptr;
  int32_t dtype = -1, redop = -1, root = -1;
  uint32_t site = 0;
};

struct Comm {
  std::atomic<const void*> handle{nullptr};  // ncclComm_t; nullptr = free slot
  char id[9] = {};                           // 8 hex digits
  int rank = -1;
  int size = 0;
  int device = -1;
  std::atomic<uint64_t> collective_seq{0};           // collectives issued, in order
  std::atomic<uint64_t> split_count{0};              // splits/shrinks issued on this comm
  std::unique_ptr<std::atomic<uint64_t>[]> p2p_seq;  // per peer: sends + recvs issued to it
  std::atomic<bool> ready{false};
  // The fingerprints of the last kPrintSlots collectives, indexed by seq (null: not recorded).
  std::unique_ptr<CallPrint[]> prints;
  uint64_t prints_read = 0;  // the reader's: the last seq taken (or skipped)
};

class CommTable {
 public:
  // Slots are never reused (a launch may still be reading a destroyed communicator's slot);
  // 1024 communicators per process is far beyond what training jobs create.
  static constexpr int kMaxComms = 1024;
  // Fingerprints kept per communicator until the reader takes them (about 0.1 s of calls).
  static constexpr uint64_t kPrintSlots = 256;

  // Before any Register: whether collectives leave fingerprints (XTIMER_DESYNC).
  void EnablePrints(bool on) { prints_on_ = on; }
  bool prints_on() const { return prints_on_; }
  // Launch path: the fingerprint of collective `seq` of the communicator in `slot`; `site` is its
  // Python call site (call_sites.h), 0 if unknown.
  void RecordPrint(int slot, uint64_t seq, const char* api, uint64_t count, int dtype, int redop, int root,
                   uint32_t site);
  // One reader thread (the agent link): every fingerprint recorded since its last call, in
  // order per communicator; *lost counts those overwritten before they were read.
  template <typename Fn>
  void TakePrints(Fn&& fn, uint64_t* lost);

  // Registers a new communicator (init hooks; not the launch path). `key` is hashed into the
  // id: the unique id's bytes, or (parent id, colour, split number). Returns the slot or -1.
  int Register(const void* handle, const void* key, size_t key_len, int rank, int size, int device);
  // Launch path: the slot of `handle`, or -1 if unknown.
  int Find(const void* handle) const;
  Comm& at(int slot) { return comms_[slot]; }
  void Forget(const void* handle);
  // The communicator with the most ranks ever registered, destroyed ones included (rank/world
  // fallback when RANK is unset: it must stay known after the job destroys its communicators
  // at exit); -1 if none.
  int Largest() const;

 private:
  bool ReadPrint(Comm& c, uint64_t seq, CallPrintCopy* out) const;
  Comm comms_[kMaxComms];
  bool prints_on_ = false;
  std::atomic<int> used_{0};  // slots [0, used_) have been handed out
};

template <typename Fn>
void CommTable::TakePrints(Fn&& fn, uint64_t* lost) {
  if (!prints_on_) return;
  int used = used_.load(std::memory_order_acquire);
  if (used > kMaxComms) used = kMaxComms;
  for (int i = 0; i < used; ++i) {
    Comm& c = comms_[i];
    // The handle's release store publishes the ring (and the id): read it first. A destroyed
    // communicator keeps its handle, so its last calls are still taken.
    if (c.handle.load(std::memory_order_acquire) == nullptr || !c.prints) continue;
    const uint64_t issued = c.collective_seq.load(std::memory_order_acquire);
    if (issued > c.prints_read + kPrintSlots) {  // the ring went round: the oldest are gone
      *lost += issued - kPrintSlots - c.prints_read;
      c.prints_read = issued - kPrintSlots;
    }
    while (c.prints_read < issued) {
      CallPrintCopy copy;
      if (!ReadPrint(c, c.prints_read + 1, &copy)) break;  // numbered, not yet written
      copy.comm_slot = i;
      ++c.prints_read;
      if (copy.seq != 0) fn(copy);
      else ++*lost;  // overwritten while we read
    }
  }
}

// 32-bit FNV-1a of bytes, as 8 hex digits.
void CommIdOf(const void* key, size_t len, char out[9]);

}  // namespace xtimer

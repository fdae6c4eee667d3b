// NCCL communicators the process created, found by handle on the launch path without locks.
// Each gets an id that every rank of the communicator computes identically (from the unique
// id, or from the parent's id and the split colour), so stack files of different ranks can be
// compared: in-flight collectives carry (comm id, sequence number).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace xtimer {

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
};

class CommTable {
 public:
  // Slots are never reused (a launch may still be reading a destroyed communicator's slot);
  // 1024 communicators per process is far beyond what training jobs create.
  static constexpr int kMaxComms = 1024;

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
  Comm comms_[kMaxComms];
  std::atomic<int> used_{0};  // slots [0, used_) have been handed out
};

// 32-bit FNV-1a of bytes, as 8 hex digits.
void CommIdOf(const void* key, size_t len, char out[9]);

}  // namespace xtimer

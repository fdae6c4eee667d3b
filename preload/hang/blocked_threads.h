// Host threads currently blocked in a synchronising CUDA call (stream/device/event sync, a
// blocking memcpy) or in NCCL communicator set-up (ncclCommInitRank and its relatives wait for
// every rank of the communicator to arrive). A thread stuck there for longer than the hang
// timeout is a hang even when no timed op is in flight. Each thread owns one slot (claimed on its first sync, released
// when it exits); entering and leaving a call is two relaxed stores.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/kinds.h"

namespace xtimer {

struct BlockedCall {
  pid_t tid;
  const char* what;   // the API name, a string literal
  OpKind kind;        // what it waits for: kSync (the GPU) or kCommInit (the communicator's ranks)
  uint64_t since_ns;  // CLOCK_MONOTONIC at entry
};

class BlockedThreads {
 public:
  static constexpr int kMaxThreads = 4096;
  // Marks the calling thread as inside `what` until the returned scope ends. Nested scopes
  // (a sync inside communicator set-up) keep the outermost.
  class Scope {
   public:
    explicit Scope(const char* what, OpKind kind = OpKind::kSync);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    int slot_;
  };
  // Every thread blocked right now.
  static std::vector<BlockedCall> Snapshot();
};

}  // namespace xtimer

// Ranks out of step: the comparison of collective fingerprints (fingerprint.h) that the node
// agent runs over its ranks and the collector over the job. Pure: no clock (the caller passes
// its time), no file, no log, no thread; one Matcher is used by one thread at a time.
//
// NCCL pairs the k-th call of every rank of a communicator, whatever it is. Ranks whose k-th
// calls differ (operation, count, data type, reduction, root, Python call site) have taken
// different paths: the job will hang (sizes differ) or, worse, compute on mixed-up data (a
// same-size skip). The first such sequence number of a communicator is a mismatch; later ones
// of that communicator are not reported again (everything after it is shifted).
//
// A mismatch is decided once every member of the communicator has reported that sequence
// number, or `grace_ms` after the first difference was seen (ranks on other nodes, or a rank
// that never calls): the sides are grouped by fingerprint, the largest group (ties: the one
// with the lowest rank) is taken as the calls that were meant, and the ranks of the other
// groups are the suspects.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/desync/fingerprint.h"

namespace xtimer::desync {

struct Side {
  std::vector<int32_t> ranks;  // ascending
  Fingerprint call;
};

struct Mismatch {
  std::string comm;
  int32_t comm_size = 0;
  uint64_t seq = 0;
  std::vector<Side> sides;        // the majority first
  std::vector<int32_t> suspects;  // ranks outside the majority, ascending
  bool complete = false;          // every member had reported; else decided after the grace
  // "rank 2 called AllReduce #5 of 4 MiB at clip_grads (train.py:88); ranks 0-1/3 called
  // AllReduce #5 of 8 MiB at sync_grads (train.py:91)"
  std::string Line() const;
};

struct MatcherOptions {
  int64_t grace_ms = 500;   // how long a difference waits for the other members
  uint64_t window = 4096;   // sequence numbers kept per communicator behind its newest
  size_t max_comms = 4096;  // communicators followed (the oldest forgotten beyond)
};

class Matcher {
 public:
  explicit Matcher(MatcherOptions options = {}) : options_(options) {}

  // One rank's call. `now_ms`: the caller's clock, for the grace.
  void Add(int32_t rank, const Fingerprint& call, int64_t now_ms);
  // Mismatches decided by `now_ms` (each reported once).
  std::vector<Mismatch> Take(int64_t now_ms);

  size_t pending() const;  // sequence numbers held (for tests and metrics)

 private:
  struct Calls {
    std::map<int32_t, Fingerprint> by_rank;
    int64_t differ_since_ms = -1;  // when a difference was first seen
  };
  struct Comm {
    int32_t size = 0;
    uint64_t newest = 0;
    bool reported = false;  // a mismatch was reported: no more comparisons on this communicator
    std::map<uint64_t, Calls> seqs;
    uint64_t touched = 0;  // for forgetting the oldest communicator
  };
  Mismatch Decide(const std::string& comm_id, const Comm& comm, uint64_t seq, const Calls& calls) const;

  MatcherOptions options_;
  std::map<std::string, Comm> comms_;
  std::vector<Mismatch> ready_;
  uint64_t clock_ = 0;
};

}  // namespace xtimer::desync

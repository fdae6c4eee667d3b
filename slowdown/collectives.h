// Every collective the ranks reported, joined across its members by (communicator, sequence
// number). Once all members are in (the member count each rank reports), or `grace` seconds after
// the first came, a collective is final: each member's arrival (its kernel's start) is put on the
// reference clock (clock_offsets.h, fed first with the node end times of the collectives that
// just became complete), and the collective gets
//   - the median arrival (the earliest of two members) and the last arrival,
//   - transfer = median end - last arrival (never negative): the time the data took once every
//     member was there, without any waiting;
// and each member its lateness (own arrival - median arrival, at least 0) and wait (last arrival -
// own arrival). `timed` is false when a member's node has no known clock offset: then lateness,
// wait and transfer are not used.
//
// Members hold a reference to the collective (a step entry keeps its collectives); a collective
// is forgotten when the last step holding it is. Not thread-safe (the judge owns one).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "slowdown/clock_offsets.h"

namespace xtimer::slowdown {

struct CollMember {
  int32_t rank = 0;
  int node = 0;
  double start = 0, end = 0;      // raw (the member's clock)
  double lateness = 0, wait = 0;  // set when final
};

struct Collective {
  uint32_t comm = 0, op = 0;
  int64_t seq = 0;
  uint64_t bytes = 0;
  int32_t expected = 0;   // member count the ranks report (the largest)
  double first_seen = 0;  // judge clock
  std::vector<CollMember> members;
  int refs = 0;  // step entries holding it
  bool final = false;
  bool timed = false;
  double transfer = 0;   // once final and timed
  double end = 0;        // median end, reference clock
  uint64_t visited = 0;  // the judge's evaluation stamp (features.cc: count each collective once)
};

class CollectiveTable {
 public:
  // A member's part; returns the collective and its member index (to keep with the step).
  // nullptr when the rank is in it already or it has more members than it says it has.
  Collective* Add(uint32_t comm, int64_t seq, uint32_t op, uint64_t bytes, int32_t ranks, const CollMember& member,
                  double now, uint32_t* index);
  // Makes final what is complete, or older than `grace` (judge clock) with two members or more
  // (one alone is final untimed).
  void Finalize(double now, double grace, ClockOffsets* offsets, int reference, int node_count);
  // A step entry let go of it; forgotten with the last.
  void Release(Collective* c);
  size_t size() const { return table_.size(); }

 private:
  struct Key {
    uint32_t comm;
    int64_t seq;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<int64_t>()(k.seq) * 31 + k.comm; }
  };
  static void Judge(Collective& c, const ClockOffsets& offsets);

  std::unordered_map<Key, Collective, KeyHash> table_;
  std::vector<Collective*> pending_;  // not final yet
};

}  // namespace xtimer::slowdown

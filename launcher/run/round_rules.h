// The etcd rendezvous' rules as pure functions: how many nodes a round takes, which group rank
// each gets, when an open round closes, and when waiting nodes are worth a new round. No etcd
// here: etcd_rendezvous.cc reads the keys, asks these, and writes what they decide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xtimer::run {

struct RoundLimits {
  int min_nodes = 1, max_nodes = 1;  // --nnodes MIN:MAX
  int node_unit = 1;                 // --node-unit: a round has a multiple of this many nodes
};

// The nodes a round takes out of `joined`: at most MAX, rounded down to a multiple of the node
// unit; 0 when that is below MIN (the round cannot start yet).
int RoundSize(int joined, const RoundLimits& limits);

// A node that came for a round.
struct Candidate {
  std::string id;
  int prev_rank = -1;   // its group rank in the last round it ran in; -1: none
  int64_t arrived = 0;  // when it came (etcd's create revision of its join key): earlier first
};

// The round's nodes by group rank, `size` of the candidates (fewer if there are fewer). Nodes of
// the last round are taken first, by their old rank, then newcomers by arrival. A node keeps its
// old rank when that is below `size`; the others fill the free ranks in the same order.
std::vector<std::string> AssignGroupRanks(std::vector<Candidate> candidates, int size);

// What a node sees while round R is open.
struct OpenRound {
  std::vector<std::string> joined;   // nodes that joined R
  std::vector<std::string> waiting;  // nodes under waiting/ (they came while a round ran)
  // R-1 closed (R is a re-rendezvous): its nodes that still hold their lease and have not
  // finished, i.e. the ones that will come.
  bool has_previous = false;
  std::vector<std::string> survivors;
  std::vector<std::string> expect;  // after a network check left nodes out: the nodes that stay
  bool last_call_passed = false;    // RoundSize(joined) has been >= MIN for last_call_timeout
};

enum class CloseReason {
  kNotYet,
  kFull,          // MAX nodes (as many as the node unit allows) joined
  kExpectedIn,    // every node a network check kept has joined
  kEveryoneIn,    // every survivor of R-1 joined and no other node waits to come in
  kLastCallOver,  // MIN joined and last_call_timeout passed
};
const char* Describe(CloseReason r);

// Whether R closes now. A re-rendezvous closes as soon as every survivor of the last round has
// joined and no node waits outside: nobody else is expected. A node waiting outside (a newcomer
// that has not joined yet) holds that back, and so does a round no survivor has joined (a fresh
// start): there last_call_timeout governs, as in the first round.
CloseReason ShouldClose(const OpenRound& round, const RoundLimits& limits);

// While `running` nodes run a round and `waiting` more wait: true when a new round would have
// more nodes (scale-out is worth a restart).
bool WaitingNodesFit(int running, int waiting, const RoundLimits& limits);

// --evict-slow-nodes: whether a round of `running` nodes can go on without one of them, with
// `waiting` spares to take its place: the others and the spares make a round (at least MIN, a
// multiple of the node unit). False: the slow node stays, and says so.
bool GoesOnWithout(int running, int waiting, const RoundLimits& limits);

}  // namespace xtimer::run

// How the nodes of a job agree on a round: which nodes take part, each node's group rank, the
// master address, and when every node must stop its workers and join a new round.
//
//  - StaticRendezvous: a fixed set of nodes (--node-rank, --master-addr/--master-port), or one
//    node alone (--standalone / --nnodes 1) on a free port. No store: a node restarts its own
//    workers; the other nodes' workers fail with their peers and restart the same way.
//  - EtcdRendezvous (etcd_rendezvous.cc): elastic, MIN:MAX nodes through a real etcd v3.
//
// Called from the agent's main thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launcher/run/run_options.h"

namespace xtimer::run {

struct Round {
  int64_t number = 0;  // 0, 1, 2, ... (every new round, whatever its cause)
  int restarts = 0;    // failures and hangs so far (TORCHELASTIC_RESTART_COUNT)
  int group_rank = 0;
  int group_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::vector<std::string> nodes;  // node ids by group rank (etcd), for messages
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Joins the next round and blocks until it is agreed. False with *error when this node cannot
  // take part: too few nodes by the join timeout, left out by the network check, etcd gone.
  virtual bool Join(Round* round, std::string* error) = 0;
  // Asked every monitor interval while workers run: true (with *why) when the job must go to a
  // new round: another node asked, a node of the round was lost, a new node waits to join.
  virtual bool NewRoundNeeded(std::string* why) = 0;
  // This node's workers failed or hung: every node goes to a new round, which counts as a restart.
  virtual void RequestRestart(const std::string& why) = 0;
  // This node's workers all succeeded: other nodes must not take its leaving for a loss.
  virtual void Finished() = 0;
  // Leaves for good (revokes what this node holds in the store).
  virtual void Leave() = 0;
  // --evict-slow-nodes (etcd only; the others answer 0 and false):
  // Nodes that wait outside the running round: spares that would take an evicted node's place.
  virtual int SparesWaiting() { return 0; }
  // This node leaves the run as slow: `record` (a JSON object) is stored under evicted/<addr>,
  // the node leaves, and the others go to a new round without it (no restart counted). False
  // with *error when another node is evicted in this round already, or etcd failed: it stays.
  virtual bool Evict(const std::string& record, const std::string& reason, std::string* error) {
    (void)record, (void)reason;
    return (*error = "the " + Name() + " rendezvous cannot leave a node out"), false;
  }
  // Nodes evicted from this run so far.
  virtual int Evictions() { return 0; }
  // "standalone", "static" or "etcd", for messages.
  virtual std::string Name() const = 0;
};

// One node (or a fixed set of nodes, --node-rank): never asks for a new round by itself.
std::unique_ptr<Rendezvous> MakeStaticRendezvous(const RunOptions& options);

// Elastic: nodes join under /xtimer/run/<rdzv-id>/ in etcd (docs in launcher/run/README.md).
// nullptr with *error when etcd cannot be reached.
std::unique_ptr<Rendezvous> MakeEtcdRendezvous(const RunOptions& options, std::string* error);

// A TCP port that was free a moment ago on this host (bound to port 0, then closed).
int FreePort();

// The address other nodes reach this one at: --local-addr, else the host name.
std::string LocalAddress(const RunOptions& options);

// True when a signal that stops xtimer_run (SIGINT, SIGTERM, SIGHUP, SIGQUIT; blocked in every
// thread) is pending: a rendezvous stops waiting and Join returns false, and the agent exits
// with 128 + the signal (elastic_agent.cc).
bool StopSignalPending();

}  // namespace xtimer::run

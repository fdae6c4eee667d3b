// Elastic rendezvous through etcd v3. Keys, all under P = /xtimer/run/<rdzv-id>/:
//
//   P/state                     {"round": R, "restarts": K, "reason": "..."}: the round the job is
//                               in (or going to). Moved on with compare-and-swap, so of several
//                               nodes asking at once exactly one bump happens.
//   P/rounds/R/join/<node>      {"addr": ..., "prev": <group rank in the last round or -1>}, under
//                               the node's lease: who came for round R.
//   P/rounds/R/closed           {"nodes": [...], "restarts": K, "reason": "..."}: created once
//                               (create-if-absent) when R closes (round_rules.h, ShouldClose). A
//                               node's index is its group rank.
//   P/rounds/R/master           "addr:port", put by group rank 0 of R (not under its lease, so a
//                               node slow to read it still finds it after rank 0 finished and left).
//   P/rounds/R/done/<node>      the node's workers all succeeded (its leaving is not a loss).
//   P/waiting/<node>            under the node's lease: it came while R was running.
//
// With --network-check (network_check.h), after R closes and before any worker starts:
//   P/rounds/R/netcheck         "host:port" of the probe's rendezvous, put by group rank 0 of R.
//   P/rounds/R/netcheck_verdict {"nodes": [{"node", "fate", "status", "reason"}...],
//                               "probe_time_s", "error"?}: put by group rank 0 once the probe is
//                               over; every node of R acts on it (a node that could not reach the
//                               probe too). Written after the two below.
//   P/netcheck/passed/<node>    the node passed a check: it is not probed again in this run.
//   P/netcheck/excluded/<addr>  {"node", "round", "status", "reason"}: left out; a node with
//                               this address (--local-addr or host name) cannot join the run again.
// With --evict-slow-nodes (launcher/run/README.md, "Slow nodes"):
//   P/rounds/R/eviction         the eviction of round R, created once (create-if-absent): one
//                               node at most leaves a round as slow.
//   P/evicted/<addr>            {"node", "name", "round", "cause", "scope", "cost", "since",
//                               "named_for_s", "detail", "time"}: a node with this address cannot
//                               join the run again.
// A round whose nodes all passed before is not probed. When nodes are left out, the others move
// P/state on with "expect": [the nodes that stay]; that round closes as soon as they are all in.
//
// When a round closes, who is in it and at which group rank: round_rules.h. A node lost (its
// lease expired), waiting nodes a new round would take, a failure or a hang moves P/state on; a
// watch on P/state wakes every agent. A node that could not renew its own lease for a whole TTL
// knows the others dropped it: it stops its workers and joins again once etcd answers.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/identity.h"
#include "common/log.h"
#include "common/mutex.h"
#include "launcher/run/etcd_client.h"
#include "launcher/run/network_check.h"
#include "launcher/run/round_rendezvous.h"
#include "launcher/run/round_rules.h"
#include "netprobe/node.h"

namespace xtimer::run {
namespace {

// How a step of joining a round ended.
enum class Step {
  kOk,         // done: go on
  kJoinAgain,  // the job moved to another round, or this node is not in the closed one: join again
  kEtcdDown,   // an etcd call failed (*error): try again until the join timeout
  kFail,       // this node cannot take part (*error)
};

struct State {
  int64_t round = 0;
  int restarts = 0;
  std::string reason;
  std::vector<std::string> expect;  // the round closes once these nodes are in (after a network check)
  std::string raw;                  // the value as stored, for compare-and-swap
};

bool ParseState(const std::string& raw, State* s) {
  try {
    nlohmann::json j = nlohmann::json::parse(raw);
    s->round = j.at("round").get<int64_t>();
    s->restarts = j.at("restarts").get<int>();
    s->reason = j.value("reason", "");
    s->expect = j.value("expect", std::vector<std::string>{});
    s->raw = raw;
    return true;
  } catch (...) {
    return false;
  }
}

std::string StateValue(int64_t round, int restarts, const std::string& reason,
                       const std::vector<std::string>& expect = {}) {
  nlohmann::json j = {{"round", round}, {"restarts", restarts}, {"reason", reason}};
  if (!expect.empty()) j["expect"] = expect;
  return j.dump();
}

// The node ids of a closed round's value; false when it is not one.
bool ClosedNodes(const std::string& raw, std::vector<std::string>* nodes, int* restarts = nullptr) {
  try {
    nlohmann::json c = nlohmann::json::parse(raw);
    *nodes = c.at("nodes").get<std::vector<std::string>>();
    if (restarts != nullptr) *restarts = c.value("restarts", 0);
    return true;
  } catch (...) {
    return false;
  }
}

// The last path element of each key: the node ids under a prefix.
std::vector<std::string> Ids(const std::vector<KeyValue>& kvs) {
  std::vector<std::string> ids;
  for (const KeyValue& kv : kvs) ids.push_back(kv.key.substr(kv.key.rfind('/') + 1));
  return ids;
}

std::string RandomHex() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

class EtcdRendezvous : public Rendezvous {
 public:
  EtcdRendezvous(const RunOptions& o)
      : o_(o),
        limits_{o.min_nodes, o.max_nodes, o.node_unit},
        etcd_(o.rdzv_endpoint),
        prefix_("/xtimer/run/" + o.rdzv_id + "/") {
    node_id_ = HostName() + "-" + std::to_string(getpid()) + "-" + RandomHex();
    addr_ = LocalAddress(o);
  }

  ~EtcdRendezvous() override { Leave(); }

  bool Start(std::string* error) {
    if (o_.network_check && Excluded(error)) return false;
    if (Evicted(error)) return false;
    int64_t lease = 0;
    if (!etcd_.GrantLease(static_cast<int64_t>(o_.lease_ttl_s + 0.5), &lease, error)) return false;
    lease_ = lease;
    renewed_s_ = MonotonicS();
    keepalive_ = std::thread([this] { KeepAliveLoop(); });
    etcd_.Watch(prefix_ + "state", [this] {
      MutexLock lock(mu_);
      changed_ = true;
      cv_.NotifyAll();
    });
    return true;
  }

  std::string Name() const override { return "etcd"; }

  bool Join(Round* round, std::string* error) override {
    const double deadline = MonotonicS() + o_.join_timeout_s;
    bool said_waiting = false;
    std::string said_down;
    for (;;) {
      switch (JoinOnce(deadline, round, &said_waiting, error)) {
        case Step::kOk: return true;
        case Step::kFail: return false;
        case Step::kJoinAgain: continue;
        case Step::kEtcdDown:
          if (MonotonicS() > deadline) {
            *error += " (tried until the join timeout, --rdzv-conf join_timeout)";
            return false;
          }
          if (*error != said_down)
            Log(LogLevel::kWarn, "run: %s; trying again until the join timeout (%.0f s left)", error->c_str(),
                deadline - MonotonicS());
          said_down = *error;
          if (!WaitForChange(1.0, error)) return false;
          continue;
      }
    }
  }

  bool NewRoundNeeded(std::string* why) override {
    // A lease not renewed for a whole TTL has expired in etcd: the other nodes go on without us.
    const double silent = MonotonicS() - renewed_s_.load();
    if (silent > o_.lease_ttl_s) {
      *why = "this node could not renew its etcd lease for " + std::to_string(static_cast<int>(silent)) +
             " s (lease_ttl " + std::to_string(static_cast<int>(o_.lease_ttl_s)) +
             " s), so the other nodes dropped it; it joins again when etcd answers";
      return true;
    }
    bool changed;
    {
      MutexLock lock(mu_);
      changed = changed_;
      changed_ = false;
    }
    std::string error;
    if (changed) {
      State st;
      if (ReadState(&st, &error) == Step::kOk && st.round != current_.number) return (*why = st.reason), true;
    }
    // Membership, once a second: lost nodes and nodes waiting to come in.
    double now = MonotonicS();
    if (now - last_check_s_ < 1.0) return false;
    last_check_s_ = now;
    std::string rp = RoundPrefix(current_.number);
    std::vector<KeyValue> joined, done, waiting;
    if (!etcd_.GetPrefix(rp + "join/", &joined, &error) || !etcd_.GetPrefix(rp + "done/", &done, &error) ||
        !etcd_.GetPrefix(prefix_ + "waiting/", &waiting, &error)) {
      Log(LogLevel::kWarn, "run: %s", error.c_str());
      return false;
    }
    std::set<std::string> present;
    for (const std::string& id : Ids(joined)) present.insert(id);
    for (const std::string& id : Ids(done)) present.insert(id);
    for (size_t r = 0; r < current_.nodes.size(); ++r) {
      if (present.count(current_.nodes[r])) continue;
      std::string reason =
          "node " + current_.nodes[r] + " (group rank " + std::to_string(r) + ") was lost: its etcd lease expired";
      return Bump(reason, false, why);
    }
    int outside = 0;
    for (const std::string& id : Ids(waiting))
      outside += std::find(current_.nodes.begin(), current_.nodes.end(), id) == current_.nodes.end();
    if (WaitingNodesFit(current_.group_world_size, outside, limits_)) {
      std::string reason = std::to_string(outside) + " new node(s) waiting to join";
      return Bump(reason, false, why);
    }
    return false;
  }

  void RequestRestart(const std::string& why) override {
    std::string ignored;
    Bump(why, true, &ignored);
  }

  void Finished() override {
    std::string error;
    if (!etcd_.Put(RoundPrefix(current_.number) + "done/" + node_id_, "1", 0, &error))
      Log(LogLevel::kWarn, "run: %s", error.c_str());
  }

  int SparesWaiting() override {
    std::vector<KeyValue> waiting;
    std::string error;
    if (!etcd_.GetPrefix(prefix_ + "waiting/", &waiting, &error)) {
      Log(LogLevel::kWarn, "run: %s", error.c_str());
      return 0;
    }
    int outside = 0;
    for (const std::string& id : Ids(waiting))
      outside += std::find(current_.nodes.begin(), current_.nodes.end(), id) == current_.nodes.end();
    return outside;
  }

  // The record first (so this address is refused from now on), then the lease goes (the others
  // do not wait for this node in the next round), then the state moves on.
  bool Evict(const std::string& record, const std::string& reason, std::string* error) override {
    bool created = false;
    if (!etcd_.CreateIfAbsent(RoundPrefix(current_.number) + "eviction", record, 0, &created, error)) return false;
    if (!created)
      return (*error = "another node leaves round " + std::to_string(current_.number) + " as slow; one a round"), false;
    if (!etcd_.Put(prefix_ + "evicted/" + addr_, record, 0, error)) return false;
    const State st = state_;
    Leave();
    bool swapped = false;
    std::string ignored;
    etcd_.CompareAndSwap(prefix_ + "state", st.raw, StateValue(st.round + 1, st.restarts, reason), &swapped, &ignored);
    return true;
  }

  int Evictions() override {
    std::vector<KeyValue> evicted;
    std::string error;
    if (!etcd_.GetPrefix(prefix_ + "evicted/", &evicted, &error)) return 0;
    return static_cast<int>(evicted.size());
  }

  void Leave() override {
    if (left_.exchange(true)) return;
    stop_ = true;
    cv_.NotifyAll();
    if (keepalive_.joinable()) keepalive_.join();
    etcd_.StopWatch();
    std::string error;
    if (lease_ != 0) etcd_.RevokeLease(lease_, &error);
  }

 private:
  std::string RoundPrefix(int64_t r) const { return prefix_ + "rounds/" + std::to_string(r) + "/"; }

  // One attempt at joining the round the job is in.
  Step JoinOnce(double deadline, Round* round, bool* said_waiting, std::string* error) {
    State st;
    if (Step s = ReadState(&st, error); s != Step::kOk) return s;
    if (st.restarts > o_.max_restarts) {
      *error = "the job failed: " + std::to_string(st.restarts) + " restart(s) used, more than --max-restarts " +
               std::to_string(o_.max_restarts) + " (last: " + st.reason + ")";
      return Step::kFail;
    }
    const std::string rp = RoundPrefix(st.round);
    std::string closed_raw;
    bool closed = false;
    if (!etcd_.Get(rp + "closed", &closed_raw, &closed, error)) return Step::kEtcdDown;
    std::vector<std::string> members;
    // A round that closed with this node in it and that it has not run yet (etcd failed on the
    // way): it goes on with it. Any other closed round runs without this node: it waits.
    const bool mine = closed && ClosedNodes(closed_raw, &members) &&
                      std::find(members.begin(), members.end(), node_id_) != members.end() && st.round != ran_;
    if (closed && !mine) {
      if (!etcd_.Put(prefix_ + "waiting/" + node_id_, addr_, lease_, error)) return Step::kEtcdDown;
      if (!*said_waiting)
        Log(LogLevel::kInfo, "run: round %lld is running; waiting to be taken into the next one", (long long)st.round);
      *said_waiting = true;
      if (MonotonicS() > deadline) return (*error = "no round took this node in within the join timeout"), Step::kFail;
      return WaitForChange(0.5, error) ? Step::kJoinAgain : Step::kFail;
    }
    if (!closed) {
      nlohmann::json me = {{"addr", addr_}, {"prev", prev_rank_}};
      if (!etcd_.Put(rp + "join/" + node_id_, me.dump(), lease_, error)) return Step::kEtcdDown;
    }
    if (Step s = WaitForClose(st, deadline, round, error); s != Step::kOk) return s;
    if (o_.network_check) {
      Step s = NetworkCheck(st, *round, error);
      if (s == Step::kJoinAgain) prev_rank_ = round->group_rank;  // nodes were left out, or the host was lost
      if (s != Step::kOk) return s;
    }
    std::string ignored;
    etcd_.Delete(prefix_ + "waiting/" + node_id_, &ignored);
    prev_rank_ = round->group_rank;
    ran_ = round->number;
    current_ = *round;
    state_ = st;
    last_check_s_ = 0;
    return Step::kOk;
  }

  Step ReadState(State* st, std::string* error) {
    std::string raw;
    bool found = false;
    if (!etcd_.Get(prefix_ + "state", &raw, &found, error)) return Step::kEtcdDown;
    if (!found) {
      bool created = false;
      if (!etcd_.CreateIfAbsent(prefix_ + "state", StateValue(0, 0, "start"), 0, &created, error) ||
          !etcd_.Get(prefix_ + "state", &raw, &found, error))
        return Step::kEtcdDown;
    }
    if (!ParseState(raw, st)) {
      *error = "etcd key " + prefix_ + "state is not xtimer_run's (" + raw.substr(0, 80) +
               "); another program uses --rdzv-id " + o_.rdzv_id + ": choose another id";
      return Step::kFail;
    }
    return Step::kOk;
  }

  // Moves the job to the next round (once, whoever asks first). True with the reason that won.
  bool Bump(const std::string& reason, bool restart, std::string* why) {
    std::string error;
    State st = state_;
    std::string next = StateValue(st.round + 1, st.restarts + (restart ? 1 : 0), reason);
    bool swapped = false;
    if (!etcd_.CompareAndSwap(prefix_ + "state", st.raw, next, &swapped, &error)) {
      Log(LogLevel::kWarn, "run: cannot ask for a new round: %s", error.c_str());
      return false;
    }
    if (swapped) return (*why = reason), true;
    State now;
    if (ReadState(&now, &error) == Step::kOk && now.round != current_.number) return (*why = now.reason), true;
    return false;
  }

  // Waits up to `s` seconds for P/state to change. False (with *error) when a stop signal is
  // pending: the caller gives up, and the agent exits with the signal.
  bool WaitForChange(double s, std::string* error) {
    if (StopSignalPending()) return (*error = "stopped by a signal"), false;
    MutexLock lock(mu_);
    cv_.WaitFor(mu_, std::chrono::duration<double>(s), [this]() XT_REQUIRES(mu_) { return changed_ || stop_; });
    changed_ = false;
    return true;
  }

  // Round `st.round - 1`, closed: its nodes that still hold their lease and have not finished
  // (view->survivors). view->has_previous stays false when there is no such round.
  Step Survivors(const State& st, OpenRound* view, std::string* error) {
    if (st.round == 0) return Step::kOk;
    const std::string pp = RoundPrefix(st.round - 1);
    std::string raw;
    bool found = false;
    std::vector<std::string> nodes;
    if (!etcd_.Get(pp + "closed", &raw, &found, error)) return Step::kEtcdDown;
    if (!found || !ClosedNodes(raw, &nodes)) return Step::kOk;
    std::vector<KeyValue> alive, done;
    if (!etcd_.GetPrefix(pp + "join/", &alive, error) || !etcd_.GetPrefix(pp + "done/", &done, error))
      return Step::kEtcdDown;
    const std::vector<std::string> alive_ids = Ids(alive), done_ids = Ids(done);
    view->has_previous = true;
    for (const std::string& id : nodes)
      if (std::find(alive_ids.begin(), alive_ids.end(), id) != alive_ids.end() &&
          std::find(done_ids.begin(), done_ids.end(), id) == done_ids.end())
        view->survivors.push_back(id);
    return Step::kOk;
  }

  // Waits until round `st.round` closes; kOk with *round filled when this node is in it.
  Step WaitForClose(const State& st, double deadline, Round* round, std::string* error) {
    const std::string rp = RoundPrefix(st.round);
    double enough_since = -1;
    for (;;) {
      State now;
      if (Step s = ReadState(&now, error); s != Step::kOk) return s;
      if (now.round != st.round) return Step::kJoinAgain;
      std::string closed_raw;
      bool closed = false;
      if (!etcd_.Get(rp + "closed", &closed_raw, &closed, error)) return Step::kEtcdDown;
      if (closed) return ReadClosed(st, closed_raw, deadline, round, error);
      OpenRound view;
      std::vector<KeyValue> joined, waiting;
      if (!etcd_.GetPrefix(rp + "join/", &joined, error) || !etcd_.GetPrefix(prefix_ + "waiting/", &waiting, error))
        return Step::kEtcdDown;
      if (Step s = Survivors(st, &view, error); s != Step::kOk) return s;
      view.joined = Ids(joined);
      view.waiting = Ids(waiting);
      view.expect = now.expect;
      const int n = static_cast<int>(joined.size());
      const double t = MonotonicS();
      if (RoundSize(n, limits_) == 0) enough_since = -1;
      else if (enough_since < 0) enough_since = t;
      view.last_call_passed = enough_since >= 0 && t - enough_since >= o_.last_call_timeout_s;
      const CloseReason why = ShouldClose(view, limits_);
      if (why != CloseReason::kNotYet) {
        std::vector<Candidate> c;
        for (const KeyValue& kv : joined) {
          int prev = -1;
          try {
            prev = nlohmann::json::parse(kv.value).value("prev", -1);
          } catch (...) {
          }
          c.push_back({kv.key.substr(kv.key.rfind('/') + 1), prev, kv.create_revision});
        }
        std::vector<std::string> nodes = AssignGroupRanks(std::move(c), RoundSize(n, limits_));
        nlohmann::json value = {{"nodes", nodes}, {"restarts", now.restarts}, {"reason", Describe(why)}};
        bool created = false;
        if (!etcd_.CreateIfAbsent(rp + "closed", value.dump(), 0, &created, error)) return Step::kEtcdDown;
        if (created)
          Log(LogLevel::kInfo, "run: rendezvous: round %lld closed with %zu of the %d node(s) that joined: %s",
              (long long)st.round, nodes.size(), n, Describe(why));
        continue;
      }
      if (t > deadline) {
        const int unit = std::max(1, o_.node_unit);
        const int need = (o_.min_nodes + unit - 1) / unit * unit;
        *error = "only " + std::to_string(n) + " of at least " + std::to_string(need) + " node(s) joined rendezvous '" +
                 o_.rdzv_id + "' at " + o_.rdzv_endpoint + " within " +
                 std::to_string(static_cast<int>(o_.join_timeout_s)) + " s (--rdzv-conf join_timeout" +
                 (unit > 1 ? ", rounds of a multiple of --node-unit " + std::to_string(unit) : std::string()) + ")";
        return Step::kFail;
      }
      if (!WaitForChange(0.1, error)) return Step::kFail;
    }
  }

  // The closed round's value: kOk with *round when this node is in it, else kJoinAgain.
  Step ReadClosed(const State& st, const std::string& closed_raw, double deadline, Round* round, std::string* error) {
    const std::string rp = RoundPrefix(st.round);
    std::vector<std::string> nodes;
    int restarts = 0;
    if (!ClosedNodes(closed_raw, &nodes, &restarts))
      return (*error = "etcd key " + rp + "closed is not a closed round (" + closed_raw.substr(0, 80) + ")"),
             Step::kFail;
    auto me = std::find(nodes.begin(), nodes.end(), node_id_);
    if (me == nodes.end()) return Step::kJoinAgain;  // closed without us: we wait for the next round
    round->number = st.round;
    round->restarts = restarts;
    round->group_rank = static_cast<int>(me - nodes.begin());
    round->group_world_size = static_cast<int>(nodes.size());
    round->nodes = nodes;
    return MasterOf(rp, round, deadline, error);
  }

  // Group rank 0 publishes the master; the others read it.
  Step MasterOf(const std::string& rp, Round* round, double deadline, std::string* error) {
    if (round->group_rank == 0) {
      // One port per round, also when the put is tried again after etcd failed (it may have
      // been stored, and read by the others, although the answer was lost).
      if (master_round_ != round->number) {
        master_round_ = round->number;
        master_port_ = FreePort();
      }
      round->master_addr = addr_;
      round->master_port = master_port_;
      // Not under our lease: when this node's workers finish at once and it leaves, a node still
      // reading the master must find it (it belongs to this round only, so it never misleads).
      if (!etcd_.Put(rp + "master", addr_ + ":" + std::to_string(round->master_port), 0, error)) return Step::kEtcdDown;
      return Step::kOk;
    }
    for (;;) {
      std::string v;
      bool found = false;
      if (!etcd_.Get(rp + "master", &v, &found, error)) return Step::kEtcdDown;
      size_t colon = v.rfind(':');
      if (found && colon != std::string::npos) {
        round->master_addr = v.substr(0, colon);
        round->master_port = std::atoi(v.c_str() + colon + 1);
        return Step::kOk;
      }
      if (MonotonicS() > deadline)
        return (*error = "group rank 0 did not publish the master address in time"), Step::kFail;
      if (!WaitForChange(0.05, error)) return Step::kFail;
    }
  }

  // True (with *error) when the network check left this node's address out of the run.
  bool Excluded(std::string* error) {
    return LeftOut("netcheck/excluded/", "left out of", "by the network check", error, [](const nlohmann::json& j) {
      return j.value("status", "") + " in round " + std::to_string(j.value("round", 0)) + ": " + j.value("reason", "");
    });
  }

  // True (with *error) when --evict-slow-nodes evicted this node's address from this run.
  bool Evicted(std::string* error) {
    return LeftOut("evicted/", "evicted from", "as a slow node", error, [](const nlohmann::json& j) {
      return "in round " + std::to_string(j.value("round", 0)) + ": " + j.value("cause", "") + ", " +
             j.value("detail", "");
    });
  }

  // The record under `dir` + this node's address, if any: the node may not join again. `describe`
  // gives the reason from the record (the raw text when it is not JSON).
  template <typename Describe>
  bool LeftOut(const std::string& dir, const char* left, const char* how, std::string* error, Describe describe) {
    std::string raw, ignored;
    bool found = false;
    if (!etcd_.Get(prefix_ + dir + addr_, &raw, &found, &ignored) || !found) return false;
    std::string why = raw;
    try {
      why = describe(nlohmann::json::parse(raw));
    } catch (...) {
    }
    *error = "this node (" + addr_ + ") was " + left + " run '" + o_.rdzv_id + "' " + how + " (" + why +
             "); it cannot join this run again: repair it and start the job under a new --rdzv-id";
    return true;
  }

  // Waits for `key` while round `round` (of state `st`) runs its network check. kOk with *value;
  // kJoinAgain when the job moved to another round meanwhile or group rank 0, the check's host,
  // was lost (this node then moves the state on); kFail with *error after `limit_s` or when etcd
  // fails.
  Step WaitForKey(const std::string& key, const State& st, const Round& round, double limit_s, std::string* value,
                  std::string* error) {
    const double until = MonotonicS() + limit_s;
    double next_host_check = MonotonicS() + 1;
    for (;;) {
      bool found = false;
      if (!etcd_.Get(key, value, &found, error)) return Step::kFail;
      if (found) return Step::kOk;
      State now;
      if (ReadState(&now, error) != Step::kOk) return Step::kFail;
      if (now.round != st.round) return Step::kJoinAgain;
      if (MonotonicS() >= next_host_check) {
        next_host_check = MonotonicS() + 1;
        std::string ignored;
        bool alive = false;
        if (!etcd_.Get(RoundPrefix(round.number) + "join/" + round.nodes[0], &ignored, &alive, error))
          return Step::kFail;
        if (!alive) {
          std::string reason = "node " + round.nodes[0] +
                               " (group rank 0) was lost during the network check: its "
                               "etcd lease expired";
          bool swapped = false;
          etcd_.CompareAndSwap(prefix_ + "state", st.raw, StateValue(st.round + 1, st.restarts, reason), &swapped,
                               error);
          Log(LogLevel::kWarn, "run: %s", reason.c_str());
          return Step::kJoinAgain;
        }
      }
      if (MonotonicS() > until) {
        *error = "group rank 0 did not put etcd key " + key + " within " + std::to_string(static_cast<int>(limit_s)) +
                 " s of the network check";
        return Step::kFail;
      }
      if (!WaitForChange(0.1, error)) return Step::kFail;
    }
  }

  // The network check of round `round`, just closed (state `st`): network_check.h, keys above.
  // kOk: the workers start; kJoinAgain: a new round (nodes were left out, or the check's host
  // was lost); kFail with *error: this node was left out, or etcd failed.
  Step NetworkCheck(const State& st, const Round& round, std::string* error) {
    const int n = round.group_world_size;
    if (n < 2) {
      if (!said_alone_)
        Log(LogLevel::kInfo, "run: --network-check: round %lld has one node, nobody to probe it with",
            (long long)round.number);
      said_alone_ = true;
      return Step::kOk;
    }
    std::vector<KeyValue> passed;
    if (!etcd_.GetPrefix(prefix_ + "netcheck/passed/", &passed, error)) return Step::kFail;
    const std::vector<std::string> ok = Ids(passed);
    if (std::all_of(round.nodes.begin(), round.nodes.end(),
                    [&](const std::string& id) { return std::find(ok.begin(), ok.end(), id) != ok.end(); })) {
      Log(LogLevel::kInfo, "run: network check: the %d nodes of round %lld all passed it before; not probed again", n,
          (long long)round.number);
      return Step::kOk;
    }
    const ProbeSettings settings = ProbeSettingsFromEnv(o_.exclude_straggler, o_.min_bandwidth_mbps);
    const double t0 = MonotonicS();
    Log(LogLevel::kInfo, "run: network check of round %lld: %d nodes, %lld bytes per test, %g s deadlines",
        (long long)round.number, n, (long long)settings.size, settings.timeout_s);
    std::string verdict_raw;
    if (round.group_rank == 0) {
      RoundVerdict v;
      if (!HostProbe(round, settings, &v, error) || !PublishVerdict(round, v, &verdict_raw, error)) return Step::kFail;
    } else if (Step s = JoinProbe(st, round, settings, &verdict_raw, error); s != Step::kOk) {
      return s;
    }
    return ActOnVerdict(st, round, verdict_raw, MonotonicS() - t0, error);
  }

  // Group rank 0: hosts the probe's rendezvous, tells the others where it is, takes part itself
  // and judges the report. False with *error only when etcd fails; a probe that fails is a
  // verdict (every node unchecked).
  bool HostProbe(const Round& round, const ProbeSettings& settings, RoundVerdict* verdict, std::string* error) {
    const int n = round.group_world_size;
    nlohmann::json report, full;
    std::string perr;
    netprobe::RendezvousThread host;
    if (!host.Start(ProbeOptions(settings, "", 0, 0, n), "", 0, &perr)) {
      full = {{"error", "group rank 0 cannot host the probe: " + perr}};
    } else {
      if (!etcd_.Put(RoundPrefix(round.number) + "netcheck", JoinHostPort(addr_, host.port()), lease_, error))
        return false;
      if (!RunProbeNode(settings, addr_, host.port(), 0, n, &report, &perr))
        Log(LogLevel::kWarn, "run: network check: this node's side of the probe failed: %s", perr.c_str());
      full = host.Wait();
    }
    *verdict = JudgeRound(full, n, o_.exclude_straggler);
    return true;
  }

  // Group rank 0: the passed and excluded keys first (a node that sees the verdict sees them
  // too), then the verdict. *raw: the verdict as stored.
  bool PublishVerdict(const Round& round, const RoundVerdict& v, std::string* raw, std::string* error) {
    const std::string rp = RoundPrefix(round.number);
    std::map<std::string, std::string> addr_of;
    std::vector<KeyValue> joined;
    if (!etcd_.GetPrefix(rp + "join/", &joined, error)) return false;
    for (const KeyValue& kv : joined) {
      try {
        addr_of[kv.key.substr(kv.key.rfind('/') + 1)] = nlohmann::json::parse(kv.value).value("addr", "");
      } catch (...) {
      }
    }
    for (size_t r = 0; r < round.nodes.size(); ++r) {
      const std::string& id = round.nodes[r];
      const NodeFate& f = v.nodes[r];
      if (f.fate == Fate::kPassed &&
          !etcd_.Put(prefix_ + "netcheck/passed/" + id, std::to_string(round.number), 0, error))
        return false;
      std::string addr = addr_of.count(id) && !addr_of[id].empty() ? addr_of[id] : id;
      nlohmann::json ex = {{"node", id}, {"round", round.number}, {"status", f.status}, {"reason", f.reason}};
      if (f.fate == Fate::kExcluded && !etcd_.Put(prefix_ + "netcheck/excluded/" + addr, ex.dump(), 0, error))
        return false;
    }
    *raw = v.ToJson(round.nodes).dump();
    return etcd_.Put(rp + "netcheck_verdict", *raw, 0, error);
  }

  // Any other group rank: finds the probe group rank 0 hosts, takes part, waits for the verdict.
  Step JoinProbe(const State& st, const Round& round, const ProbeSettings& settings, std::string* verdict_raw,
                 std::string* error) {
    const std::string rp = RoundPrefix(round.number);
    // Between two messages the probe waits at most 3 deadlines + 10 s; ten rounds at most.
    const double verdict_limit = 10 * (3 * settings.timeout_s + 10) + 30;
    std::string where, host;
    int port = 0;
    if (Step s = WaitForKey(rp + "netcheck", st, round, 60, &where, error); s != Step::kOk) return s;
    if (!SplitProbeAddress(where, &host, &port))
      return (*error = "etcd key " + rp + "netcheck is not host:port (" + where.substr(0, 80) + ")"), Step::kFail;
    nlohmann::json report;
    std::string perr;
    if (!RunProbeNode(settings, host, port, round.group_rank, round.group_world_size, &report, &perr))
      Log(LogLevel::kWarn, "run: network check: this node could not take part in the probe on group rank 0 (%s): %s",
          where.c_str(), perr.c_str());
    return WaitForKey(rp + "netcheck_verdict", st, round, verdict_limit, verdict_raw, error);
  }

  // Every node: acts on the one verdict group rank 0 stored. kOk: this node's workers start;
  // kJoinAgain: nodes were left out and the others go to a new round without them (moving the
  // state on with "expect"); kFail: this node was left out.
  Step ActOnVerdict(const State& st, const Round& round, const std::string& verdict_raw, double took_s,
                    std::string* error) {
    const int n = round.group_world_size;
    RoundVerdict v;
    std::string perr;
    nlohmann::json vj = nlohmann::json::parse(verdict_raw, nullptr, false);
    if (!RoundVerdict::FromJson(vj, n, &v, &perr))
      return (*error = "etcd key " + RoundPrefix(round.number) + "netcheck_verdict: " + perr), Step::kFail;
    const std::string summary = v.Summary();
    if (!v.error.empty()) {
      Log(LogLevel::kWarn, "run: network check of round %lld could not be done (%s); the workers start unchecked",
          (long long)round.number, summary.c_str());
      return Step::kOk;
    }
    Log(LogLevel::kInfo, "run: network check of round %lld: verdict after %.2f s: %s", (long long)round.number, took_s,
        summary.c_str());
    const NodeFate& me = v.nodes[round.group_rank];
    if (me.fate == Fate::kExcluded) {
      *error = "left out by the network check of round " + std::to_string(round.number) + ": this node (group rank " +
               std::to_string(round.group_rank) + ", " + addr_ + ") is " + me.status + ": " + me.reason;
      return Step::kFail;
    }
    if (me.status == "straggler")
      Log(LogLevel::kWarn, "run: this node is a straggler (%s); it stays (--exclude-straggler would leave it out)",
          me.reason.c_str());
    std::vector<int> out = v.Excluded();
    if (out.empty()) return Step::kOk;
    std::vector<std::string> stay;
    std::string names;
    for (int r = 0; r < n; ++r) {
      if (v.nodes[r].fate != Fate::kExcluded) stay.push_back(round.nodes[r]);
      else names += (names.empty() ? "" : ", ") + round.nodes[r] + " (" + v.nodes[r].status + ")";
    }
    std::string reason = std::to_string(out.size()) + " node(s) left out by the network check of round " +
                         std::to_string(round.number) + ": " + names;
    bool swapped = false;
    std::string ignored;
    etcd_.CompareAndSwap(prefix_ + "state", st.raw, StateValue(st.round + 1, st.restarts, reason, stay), &swapped,
                         &ignored);
    Log(LogLevel::kInfo, "run: %s; the %zu other node(s) go to a new round without them", reason.c_str(), stay.size());
    return Step::kJoinAgain;
  }

  void KeepAliveLoop() {
    double period = std::max(0.5, o_.lease_ttl_s / 3);
    while (!stop_) {
      {
        MutexLock lock(mu_);
        cv_.WaitFor(mu_, std::chrono::duration<double>(period), [this] { return stop_.load(); });
      }
      if (stop_) return;
      std::string error;
      // Taken when the answer is in: etcd restarted the TTL no later than that, so a lease not
      // renewed for a TTL since has surely expired.
      if (etcd_.KeepAlive(lease_, &error)) {
        renewed_s_ = MonotonicS();
        continue;
      }
      Log(LogLevel::kWarn, "run: %s", error.c_str());
      // The lease expired (this node was silent too long): the others have dropped us. A new
      // lease lets the next Join come back.
      int64_t lease = 0;
      if (error.find("expired") != std::string::npos &&
          etcd_.GrantLease(static_cast<int64_t>(o_.lease_ttl_s + 0.5), &lease, &error)) {
        lease_ = lease;
        renewed_s_ = MonotonicS();
      }
    }
  }

  RunOptions o_;
  RoundLimits limits_;
  EtcdClient etcd_;
  std::string prefix_, node_id_, addr_;
  std::atomic<int64_t> lease_{0};
  std::atomic<double> renewed_s_{0};  // when the lease was last granted or kept alive
  std::thread keepalive_;
  Mutex mu_;
  CondVar cv_;
  bool changed_ XT_GUARDED_BY(mu_) = false;  // the watch saw the state key change
  std::atomic<bool> stop_{false}, left_{false};
  int prev_rank_ = -1;
  int64_t ran_ = -1;  // the last round this node started its workers in
  int64_t master_round_ = -1;
  int master_port_ = 0;
  Round current_;
  State state_;
  double last_check_s_ = 0;
  bool said_alone_ = false;
};

}  // namespace

std::unique_ptr<Rendezvous> MakeEtcdRendezvous(const RunOptions& options, std::string* error) {
  auto r = std::make_unique<EtcdRendezvous>(options);
  if (!r->Start(error)) return nullptr;
  return r;
}

}  // namespace xtimer::run

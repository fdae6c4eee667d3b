// The agents the collector knows: one session per registration, with the way to reach the agent
// (its SendCommand) and the ranks it registered or reported.
//
// Guarantees: at most kMaxSessions sessions; one session per non-empty agent_id (a reconnect
// replaces the old session); host and agent id capped at 255 bytes. A session whose command
// stream closed (Disconnect) is never sent to again and is forgotten after `idle_s` without a
// call (ForgetIdle); one that was never disconnected (an embedded agent) never expires.
//
// Not thread-safe: the core owns one and calls it under its mutex (collector_core.cc). The
// SendCommand it returns is called by the core after that mutex is released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>

#include "collector/collector_core.h"

namespace xtimer::collector {

struct AgentSession {
  std::string node, agent_id;
  CollectorCore::SendCommand send;  // empty once disconnected
  std::set<int32_t> ranks;          // the ranks it registered or reported
  bool connected = true;
  double last_seen_s = 0;
};

class SessionRegistry {
 public:
  static constexpr size_t kMaxSessions = 100000;

  // No room for a new session of `agent_id` (one that has a session can always come back).
  bool Full(const std::string& agent_id) const;
  // Adds session `id` for the registration, replacing the agent's earlier session.
  AgentSession& Add(const std::string& id, const v1::RegisterRequest& request, CollectorCore::SendCommand send,
                    double now);
  AgentSession* Find(const std::string& id);
  const AgentSession* Find(const std::string& id) const;
  // The session exists, is connected and has a way to reach it.
  bool Reachable(const std::string& id) const;
  // Its command stream closed. Unknown ids are ignored.
  void Disconnect(const std::string& id, double now);
  // Forgets sessions disconnected and silent for more than idle_s.
  void ForgetIdle(double now, double idle_s);
  // After the job's world size became `world`: ranks beyond it are no session's any more.
  void DropRanksFrom(int32_t world);

  size_t size() const { return sessions_.size(); }
  size_t Connected() const;   // connected sessions
  size_t Reachables() const;  // connected sessions with a SendCommand
  const std::unordered_map<std::string, AgentSession>& all() const { return sessions_; }

 private:
  std::unordered_map<std::string, AgentSession> sessions_;
  std::unordered_map<std::string, std::string> session_of_agent_;  // agent_id -> session id
};

}  // namespace xtimer::collector

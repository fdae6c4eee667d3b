#include "collector/session_registry.h"

#include <algorithm>

#include "collector/agent_strings.h"

namespace xtimer::collector {

bool SessionRegistry::Full(const std::string& agent_id) const {
  return sessions_.size() >= kMaxSessions && !session_of_agent_.contains(agent_id);
}

AgentSession& SessionRegistry::Add(const std::string& id, const v1::RegisterRequest& request,
                                   CollectorCore::SendCommand send, double now) {
  if (!request.agent_id().empty()) {
    auto it = session_of_agent_.find(request.agent_id());
    if (it != session_of_agent_.end()) sessions_.erase(it->second);  // a reconnect replaces
  }
  AgentSession& s = sessions_[id];
  s.node = request.node();
  Truncate(&s.node, 255);
  s.agent_id = request.agent_id();
  Truncate(&s.agent_id, 255);
  s.send = std::move(send);
  s.last_seen_s = now;
  if (!s.agent_id.empty()) session_of_agent_[s.agent_id] = id;
  return s;
}

AgentSession* SessionRegistry::Find(const std::string& id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

const AgentSession* SessionRegistry::Find(const std::string& id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

bool SessionRegistry::Reachable(const std::string& id) const {
  const AgentSession* s = Find(id);
  return s != nullptr && s->connected && s->send;
}

void SessionRegistry::Disconnect(const std::string& id, double now) {
  AgentSession* s = Find(id);
  if (s == nullptr) return;
  s->connected = false;
  s->send = nullptr;
  s->last_seen_s = now;
}

void SessionRegistry::ForgetIdle(double now, double idle_s) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (!it->second.connected && now - it->second.last_seen_s > idle_s) {
      auto a = session_of_agent_.find(it->second.agent_id);
      if (a != session_of_agent_.end() && a->second == it->first) session_of_agent_.erase(a);
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

void SessionRegistry::DropRanksFrom(int32_t world) {
  for (auto& [id, s] : sessions_) std::erase_if(s.ranks, [world](int32_t r) { return r >= world; });
}

size_t SessionRegistry::Connected() const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s.connected;
  return n;
}

size_t SessionRegistry::Reachables() const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s.connected && s.send;
  return n;
}

}  // namespace xtimer::collector

#include "launcher/agent/slow_node_eviction.h"

#include <cstdio>
#include <set>

namespace xtimer {
namespace {

using slowdown::Cause;
using slowdown::Finding;
using slowdown::Scope;
using slowdown::Verdict;

// What identifies a slowdown across evaluations: the judge's key ("node host-b network"); a
// verdict that came over the gRPC link has none, so it is made from the same parts.
std::string KeyOf(const Finding& f) {
  if (!f.key.empty()) return f.key;
  std::string who = f.scope == Scope::kRank ? std::to_string(f.rank) : f.node;
  if (f.scope == Scope::kLink) who += "-" + f.peer;
  return std::string(slowdown::ScopeName(f.scope)) + " " + who + " " + slowdown::CauseName(f.cause);
}

bool Names(const Verdict& v, const std::string& key) {
  for (const Finding& f : v.slow)
    if (KeyOf(f) == key) return true;
  return false;
}

// The distinct nodes the evicting findings name.
size_t NamedNodes(const Verdict& v) {
  std::set<std::string> slow;
  for (const Finding& f : v.slow)
    if (EvictingFinding(f, f.node)) slow.insert(f.node);
  return slow.size();
}

std::string Describe(const Finding& f) {
  char buf[96];
  std::snprintf(buf, sizeof buf, " (cost %.0f%% of the job's step)", f.cost * 100);
  return KeyOf(f) + " on " + f.node + ": " + f.detail + buf;
}

}  // namespace

bool EvictingFinding(const Finding& f, const std::string& node) {
  if (node.empty() || f.node != node) return false;
  if (f.cause == Cause::kGpuCompute) return f.scope == Scope::kRank || f.scope == Scope::kNode;
  if (f.cause == Cause::kNetwork) return f.scope == Scope::kNode;
  return false;  // host, GC, data loading: they would follow the job to any node
}

EvictionCall JudgeEviction(const std::deque<Verdict>& history, const std::string& node, int job_nodes,
                           const EvictionThresholds& t) {
  EvictionCall call;
  auto newest = history.rbegin();
  while (newest != history.rend() && !newest->judged) ++newest;
  if (newest == history.rend()) return call;
  const Finding* pick = nullptr;
  for (const Finding& f : newest->slow) {
    if (f.node != node) continue;
    if (!EvictingFinding(f, node)) {
      if (call.reason.empty()) {
        call.reason = "is named slow for a cause that would follow the job to any node, so it stays: " + Describe(f);
        call.say_once = "cause " + KeyOf(f);
      }
      continue;
    }
    if (f.cost < t.min_cost) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " (below --evict-slow-cost %.2f)", t.min_cost);
      call.reason = "is named slow, but costs too little to evict: " + Describe(f) + buf;
      call.say_once.clear();
      continue;
    }
    pick = &f;
    break;
  }
  if (pick == nullptr) return call;
  call.say_once.clear();
  const size_t job = job_nodes > 0 ? static_cast<size_t>(job_nodes) : 0, named = NamedNodes(*newest);
  if (named * 2 > job) {
    call.reason = "is one of " + std::to_string(named) + " of the job's " + std::to_string(job) +
                  " node(s) named slow at once: the job is slow, not one node; nobody is evicted";
    call.say_once = "majority";
    return call;
  }
  // Back through the judged verdicts while each names the same finding.
  double first = newest->updated;
  for (auto it = newest; it != history.rend(); ++it) {
    if (!it->judged || !Names(*it, KeyOf(*pick))) break;
    first = it->updated;
  }
  call.finding = *pick;
  call.key = KeyOf(*pick);
  call.named_for_s = newest->updated - first;
  char buf[128];
  if (call.named_for_s < t.sustain_s) {
    std::snprintf(buf, sizeof buf,
                  "is named slow for %.0f s of the %.0f s (--evict-slow-after) that evict: ", call.named_for_s,
                  t.sustain_s);
    call.reason = buf + Describe(*pick);
    return call;
  }
  call.evict = true;
  call.say_once.clear();
  std::snprintf(buf, sizeof buf, "named slow for %.0f s (--evict-slow-after %.0f): ", call.named_for_s, t.sustain_s);
  call.reason = buf + Describe(*pick);
  return call;
}

void KeepVerdict(std::deque<Verdict>* history, const Verdict& v, const EvictionThresholds& t) {
  if (!history->empty() && history->back().updated == v.updated) return;
  history->push_back(v);
  while (history->size() > 512 || (history->size() > 1 && history->front().updated < v.updated - t.sustain_s - 30))
    history->pop_front();
}

}  // namespace xtimer

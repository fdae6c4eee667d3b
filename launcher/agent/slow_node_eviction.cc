#include "launcher/agent/slow_node_eviction.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
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

bool EvictionOfRecord(const std::string& record, const std::string& reason, v1::NodeEviction* out, std::string* error) {
  const nlohmann::json j = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return (*error = "the eviction record is not a JSON object"), false;
  v1::NodeEviction e;
  std::string bad;
  auto text = [&](const char* key, std::string* to, bool required) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required && bad.empty()) bad = std::string("\"") + key + "\" is missing";
      return;
    }
    if (!it->is_string()) {
      if (bad.empty()) bad = std::string("\"") + key + "\" is not a string";
      return;
    }
    *to = it->get<std::string>();
  };
  auto number = [&](const char* key) -> double {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return 0;
    if (!it->is_number() || !std::isfinite(it->get<double>())) {
      if (bad.empty()) bad = std::string("\"") + key + "\" is not a finite number";
      return 0;
    }
    return it->get<double>();
  };
  auto integer = [&](const char* key, int64_t lo, int64_t hi) -> int64_t {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return 0;
    if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
      if (bad.empty())
        bad = std::string("\"") + key + "\" is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
              "]";
      return 0;
    }
    return it->get<int64_t>();
  };
  text("node", e.mutable_node(), false);
  text("name", e.mutable_name(), true);
  text("cause", e.mutable_cause(), true);
  text("scope", e.mutable_scope(), false);
  text("detail", e.mutable_detail(), false);
  e.set_round(integer("round", 0, INT64_MAX));
  e.set_group_rank(static_cast<int32_t>(integer("group_rank", -1, INT32_MAX)));
  e.set_cost(number("cost"));
  e.set_since(number("since"));
  e.set_named_for_s(number("named_for_s"));
  e.set_spares(static_cast<int32_t>(integer("spares", 0, INT32_MAX)));
  e.set_time(number("time"));
  if (!bad.empty()) return (*error = "the eviction record's " + bad), false;
  e.set_reason(reason);
  *out = std::move(e);
  return true;
}

void KeepVerdict(std::deque<Verdict>* history, const Verdict& v, const EvictionThresholds& t) {
  if (!history->empty() && history->back().updated == v.updated) return;
  history->push_back(v);
  while (history->size() > 512 || (history->size() > 1 && history->front().updated < v.updated - t.sustain_s - 30))
    history->pop_front();
}

}  // namespace xtimer

#include "slowdown/slowdown_verdict_json.h"

#include <cmath>

namespace xtimer::slowdown {
namespace {

using J = nlohmann::json;

// Three decimals (milliseconds for times): the file is read by people too.
double R3(double v) { return std::isfinite(v) ? std::round(v * 1000) / 1000 : 0; }

}  // namespace

J FindingJson(const Finding& f) {
  J j;
  j["rank"] = f.scope == Scope::kRank ? J(f.rank) : J(nullptr);
  j["node"] = f.node.empty() ? J(nullptr) : J(f.node);
  if (f.scope == Scope::kLink) j["peer"] = f.peer;
  j["ranks"] = f.ranks;
  j["cause"] = CauseName(f.cause);
  j["scope"] = ScopeName(f.scope);
  j["since"] = R3(f.since);
  j["score"] = R3(f.score);
  j["cost"] = R3(f.cost);
  j["detail"] = f.detail;
  return j;
}

J VerdictJson(const Verdict& v, bool with_ranks) {
  J j;
  j["updated"] = R3(v.updated);
  j["step_time_s"] = v.judged ? J(R3(v.step_time_s)) : J(nullptr);
  j["baseline_step_time_s"] = v.baseline_step_time_s > 0 ? J(R3(v.baseline_step_time_s)) : J(nullptr);
  J& slow = j["slow"] = J::array();
  for (const Finding& f : v.slow) slow.push_back(FindingJson(f));
  if (with_ranks) {
    J& ranks = j["ranks"] = J::array();
    for (const RankStatus& r : v.ranks) {
      J x = {{"rank", r.rank},
             {"node", r.node},
             {"step_time_s", R3(r.step_time_s)},
             {"score", R3(r.score)},
             {"individual", R3(r.individual)},
             {"steps", r.steps},
             {"slow", r.slow}};
      if (r.slow) x["cause"] = CauseName(r.cause);
      ranks.push_back(std::move(x));
    }
  }
  return j;
}

std::string VerdictText(const Verdict& v) {
  return VerdictJson(v).dump(1, ' ', false, J::error_handler_t::replace) + "\n";
}

}  // namespace xtimer::slowdown

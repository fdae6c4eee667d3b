#include "common/desync/desync_verdict.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "common/stacks/rank_set.h"

namespace xtimer::desync {

std::string UtcStamp(int64_t unix_ms, const char* format) {
  time_t t = static_cast<time_t>(unix_ms / 1000);
  tm parts{};
  gmtime_r(&t, &parts);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &parts);
  return buf;
}

std::string VerdictJson(const Mismatch& m, int64_t unix_ms) {
  using J = nlohmann::ordered_json;
  J j;
  j["format"] = "xtimer-verdict";
  j["version"] = 1;
  j["kind"] = "desync";
  j["time"] = UtcStamp(unix_ms, "%Y-%m-%dT%H:%M:%SZ");
  j["comm"] = m.comm;
  j["comm_size"] = m.comm_size;
  j["seq"] = m.seq;
  j["complete"] = m.complete;
  j["sides"] = J::array();
  for (const Side& s : m.sides) {
    const Fingerprint& c = s.call;
    j["sides"].push_back({{"ranks", s.ranks},
                          {"ranks_folded", FoldRanks(s.ranks)},
                          {"op", c.op},
                          {"count", c.count},
                          {"dtype", DtypeName(c.dtype)},
                          {"bytes", c.count * DtypeSize(c.dtype)},
                          {"redop", c.redop},
                          {"root", c.root},
                          {"site", c.site}});
  }
  const Side& majority = m.sides.front();
  j["suspects"] = J::array();
  for (size_t i = 1; i < m.sides.size(); ++i)
    for (int32_t r : m.sides[i].ranks)
      j["suspects"].push_back(
          {{"rank", r},
           {"reason", "called " + Describe(m.sides[i].call) + " where rank" +
                          (majority.ranks.size() == 1 ? " " : "s ") + FoldRanks(majority.ranks) + " called " +
                          Describe(majority.call)},
           {"kinds", J::array({"desync"})},
           {"frames", m.sides[i].call.site.empty() ? J::array() : J::array({m.sides[i].call.site})}});
  j["summary"] = J::array({"ranks out of step on communicator " + m.comm + ": " + m.Line()});
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace xtimer::desync

#include "viewer/speedscope_writer.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

namespace xtimer {

std::string WriteSpeedscope(const TreeView& v, std::string_view name) {
  using J = nlohmann::ordered_json;
  J frames = J::array(), samples = J::array(), weights = J::array();
  std::unordered_map<std::string_view, size_t> frame_index;
  std::vector<size_t> index(v.tree->size(), 0);
  uint64_t total = 0;
  std::vector<size_t> path;
  for (uint32_t i = 1; i < v.tree->size(); ++i) {
    auto [it, fresh] = frame_index.try_emplace(v.label[i], frames.size());
    if (fresh) frames.push_back({{"name", v.label[i]}});
    index[i] = it->second;
    if (v.self[i] == 0) continue;
    path.clear();
    for (uint32_t at = i; at != StackTree::kRoot; at = v.tree->node(at).parent) path.push_back(at);
    J sample = J::array();
    for (auto p = path.rbegin(); p != path.rend(); ++p) sample.push_back(index[*p]);
    samples.push_back(std::move(sample));
    weights.push_back(v.self[i]);
    total += v.self[i];
  }
  J j;
  j["$schema"] = "https://www.speedscope.app/file-format-schema.json";
  j["shared"] = {{"frames", frames}};
  j["profiles"] = J::array({J{{"type", "sampled"},
                              {"name", name},
                              {"unit", "none"},
                              {"startValue", 0},
                              {"endValue", total},
                              {"samples", samples},
                              {"weights", weights}}});
  j["name"] = name;
  j["activeProfileIndex"] = 0;
  j["exporter"] = "xtimer_stacktrace_viewer";
  return j.dump(-1, ' ', false, J::error_handler_t::replace) + "\n";
}

}  // namespace xtimer

#include "viewer/speedscope_writer.h"

#include <cstdio>
#include <unordered_map>
#include <vector>

#include "common/utf8_text.h"

namespace xtimer {
namespace {

// Bytes at s[i] that start a UTF-8 sequence and stop before it is complete or goes wrong (at
// least 1): the "maximal subpart" that becomes one U+FFFD.
size_t BadUtf8Length(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) break;
  }
  return k;
}

// A JSON string (RFC 8259) byte for byte as nlohmann-json's dump(error_handler_t::replace) writes
// it: each maximal bad UTF-8 subpart becomes U+FFFD, \b \f \n \r \t short escapes, other C0
// controls \u00xx. Labels are already clean UTF-8 without controls (frame_label.h), so for them
// this only escapes '"' and '\'. (JsonWriter, common/json_writer.h, does not replace bad UTF-8.)
void WriteJsonString(ByteSink& out, std::string_view s) {
  out << '"';
  size_t from = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = Utf8Length(s, i);
    const char* esc = nullptr;
    char buf[8];
    if (n == 0) {
      esc = "\xEF\xBF\xBD";
      n = BadUtf8Length(s, i);
    } else if (c == '"') {
      esc = "\\\"";
    } else if (c == '\\') {
      esc = "\\\\";
    } else if (c < 0x20) {
      switch (c) {
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default: std::snprintf(buf, sizeof buf, "\\u%04x", c), esc = buf;
      }
    }
    if (esc != nullptr) {
      out << s.substr(from, i - from) << esc;
      from = i + n;
    }
    i += n;
  }
  out << s.substr(from) << '"';
}

}  // namespace

void WriteSpeedscope(const TreeView& v, std::string_view name, ByteSink& out,
                     uint64_t (*label_hash)(std::string_view)) {
  // Two passes over the nodes: the first writes the shared frame table (one entry per distinct
  // label, in order of first use) and numbers each node's frame; the second writes one sample
  // (the path from the root, as frame numbers) per node where stacks end, then the weights.
  out << "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"shared\":{\"frames\":[";
  // Labels are made on demand (TreeView::Label), so the distinct ones are found by their hash;
  // a hash seen before is confirmed by comparing with the label of the node it was first seen
  // at, and the rare different label with the same hash is numbered through `collided`.
  std::unordered_map<uint64_t, uint32_t> by_hash;  // label hash -> frame number
  std::unordered_map<std::string, uint32_t> collided;
  std::vector<uint32_t> first_node;  // frame number -> the node it was first seen at
  std::vector<uint32_t> index(v.tree->size(), 0);
  auto new_frame = [&](uint32_t node, const std::string& label) {
    out << (first_node.empty() ? "{\"name\":" : ",{\"name\":");
    WriteJsonString(out, label);
    out << '}';
    first_node.push_back(node);
    return static_cast<uint32_t>(first_node.size() - 1);
  };
  for (uint32_t i = 1; i < v.tree->size(); ++i) {
    std::string label = v.Label(i);
    auto [it, fresh] = by_hash.try_emplace(label_hash ? label_hash(label) : std::hash<std::string>()(label), 0);
    if (fresh) {
      it->second = new_frame(i, label);
      index[i] = it->second;
    } else if (v.Label(first_node[it->second]) == label) {
      index[i] = it->second;
    } else {  // a different label had this hash first
      auto [c, c_fresh] = collided.try_emplace(label, 0);
      if (c_fresh) c->second = new_frame(i, label);
      index[i] = c->second;
    }
  }
  by_hash = {};
  collided = {};
  first_node = {};
  uint64_t total = 0;
  for (uint32_t i = 1; i < v.tree->size(); ++i) total += v.self[i];
  out << "]},\"profiles\":[{\"type\":\"sampled\",\"name\":";
  WriteJsonString(out, name);
  out << ",\"unit\":\"none\",\"startValue\":0,\"endValue\":" << total << ",\"samples\":[";
  std::vector<uint32_t> path;
  bool first = true;
  for (uint32_t i = 1; i < v.tree->size(); ++i) {
    if (v.self[i] == 0) continue;
    path.clear();
    for (uint32_t at = i; at != StackTree::kRoot; at = v.tree->node(at).parent) path.push_back(index[at]);
    out << (first ? "[" : ",[");
    first = false;
    for (auto p = path.rbegin(); p != path.rend(); ++p) out << (p == path.rbegin() ? "" : ",") << *p;
    out << ']';
  }
  out << "],\"weights\":[";
  first = true;
  for (uint32_t i = 1; i < v.tree->size(); ++i) {
    if (v.self[i] == 0) continue;
    out << (first ? "" : ",") << v.self[i];
    first = false;
  }
  out << "]}],\"name\":";
  WriteJsonString(out, name);
  out << ",\"activeProfileIndex\":0,\"exporter\":\"xtimer_stacktrace_viewer\"}\n";
}

}  // namespace xtimer

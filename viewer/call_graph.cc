#include "viewer/call_graph.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <algorithm>
#include <mutex>

#include "viewer/frame_label.h"

namespace xtimer {
namespace {

// A DOT quoted string: backslash first, so that no escape of Graphviz's (\N, \G, \l) survives.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string Shorten(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

}  // namespace

void WriteCallGraphDot(const TreeView& v, const CallGraphOptions& o, ByteSink& out, size_t* shown) {
  const StackTree& tree = *v.tree;
  const MergedStacks& m = *v.merged;
  std::vector<uint32_t> order;
  for (uint32_t i = 1; i < tree.size(); ++i)
    if (v.total[i] > 0) order.push_back(i);
  // Widest first; a parent is never narrower than its child and is shallower, so it comes first.
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    if (v.total[a] != v.total[b]) return v.total[a] > v.total[b];
    if (tree.node(a).depth != tree.node(b).depth) return tree.node(a).depth < tree.node(b).depth;
    return a < b;
  });
  size_t all = order.size();
  if (order.size() > o.max_nodes) order.resize(o.max_nodes);
  std::sort(order.begin(), order.end());
  std::vector<uint8_t> keep(tree.size(), 0);
  for (uint32_t n : order) keep[n] = 1;
  std::vector<uint8_t> splits_here(tree.size(), 0);
  for (uint32_t n : order)
    if (v.split[n]) splits_here[tree.node(n).parent] = 1;

  std::string title = o.title;
  if (all > order.size())
    title += " (the " + std::to_string(order.size()) + " widest of " + std::to_string(all) + " frames)";
  out << "digraph stacks {\n";
  out << "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=14, labelloc=t, label=" << Quote(title) << "];\n";
  out << "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, fillcolor=\"#ffffff\"];\n";
  out << "  edge [color=\"#777777\"];\n";
  const TreeNode& root = tree.node(StackTree::kRoot);
  out << "  n0 [label="
      << Quote("all ranks\n" + RankSet(root.ranks).Fold(kLabelMaxRanges) + " (" + std::to_string(root.ranks.size()) +
               " of " + std::to_string(m.world_size) + ")")
      << (splits_here[0] ? ", penwidth=3, color=\"#c62828\"" : "") << "];\n";
  for (uint32_t n : order) {
    const TreeNode& node = tree.node(n);
    const FrameInfo& f = m.frames[node.frame];
    RankSet ranks(node.ranks);
    std::string text = Shorten(CleanFrameText(f.Name()), 70) + "\n" + Shorten(CleanFrameText(f.Source()), 70) +
                       "\nranks " + ranks.Fold(8) + " (" + std::to_string(ranks.size()) + ")";
    std::string_view fill = v.split[n] ? "#ffb74d" : FrameKindColor(f.kind);
    out << "  n" << n << " [label=" << Quote(text) << ", tooltip=" << Quote(v.Label(n)) << ", fillcolor=\"" << fill
        << (v.split[n] ? "\"" : "80\"");
    if (splits_here[n]) out << ", penwidth=3, color=\"#c62828\"";
    out << "];\n";
    out << "  n" << node.parent << " -> n" << n;
    if (v.split[n]) out << " [color=\"#e65100\", penwidth=2]";
    out << ";\n";
  }
  out << "}\n";
  if (shown != nullptr) *shown = order.size();
}

bool RenderDotToSvg(const std::string& dot, std::string* svg, std::string* error) {
  // libcgraph keeps global state (error level, the lexer): one rendering at a time.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  agseterr(AGMAX);  // warnings would go to stderr unasked
  // One context for the life of the process, never freed: Graphviz 2.42's pango plugin keeps a
  // pointer to the last font name, which lives in the context's font table; freeing the context
  // and rendering again with a new one read freed memory (AddressSanitizer caught it).
  static GVC_t* gvc = gvContext();
  if (gvc == nullptr) return *error = "graphviz: no context", false;
  Agraph_t* g = agmemread(dot.c_str());
  if (g == nullptr) return *error = "graphviz: cannot read the graph", false;
  bool ok = false;
  if (gvLayout(gvc, g, "dot") != 0) {
    *error = "graphviz: layout failed";
  } else {
    char* data = nullptr;
    unsigned int len = 0;
    if (gvRenderData(gvc, g, "svg", &data, &len) != 0 || data == nullptr) {
      *error = "graphviz: SVG rendering failed (is the core plugin installed?)";
    } else {
      svg->assign(data, len);
      ok = true;
    }
    if (data != nullptr) gvFreeRenderData(data);
    gvFreeLayout(gvc, g);
  }
  agclose(g);
  return ok;
}

}  // namespace xtimer

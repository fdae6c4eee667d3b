#include "viewer/folded_writer.h"

namespace xtimer {

void WriteFolded(const TreeView& v, ByteSink& out) {
  std::string prefix;
  // Depth-first with an explicit stack: hostile input may nest thousands of frames deep.
  struct Item {
    uint32_t node;
    size_t prefix_len;
  };
  std::vector<Item> stack;
  const auto& root_children = v.tree->node(StackTree::kRoot).children;
  for (auto it = root_children.rbegin(); it != root_children.rend(); ++it) stack.push_back({*it, 0});
  while (!stack.empty()) {
    Item item = stack.back();
    stack.pop_back();
    if (v.total[item.node] == 0) continue;
    prefix.resize(item.prefix_len);
    if (!prefix.empty()) prefix += ';';
    prefix += v.Label(item.node);
    if (v.self[item.node] > 0) {
      out << prefix << ' ' << v.self[item.node] << '\n';
    }
    const auto& children = v.tree->node(item.node).children;
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back({*it, prefix.size()});
  }
}

}  // namespace xtimer

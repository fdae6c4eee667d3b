#include "viewer/stack_tree.h"

#include <algorithm>

namespace xtimer {

StackTree::StackTree() { nodes_.emplace_back(); }

void StackTree::Reserve(size_t more) {
  size_t want = nodes_.size() + more;
  if (want <= nodes_.capacity()) return;
  nodes_.reserve(std::max(want, nodes_.capacity() + nodes_.capacity() / 2));
  child_.reserve(nodes_.capacity());
}

uint32_t StackTree::Child(uint32_t parent, uint32_t frame) {
  uint64_t key = (uint64_t{parent} << 32) | frame;
  auto [it, inserted] = child_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (inserted) {
    TreeNode& n = nodes_.emplace_back();
    n.frame = frame;
    n.parent = parent;
    n.depth = nodes_[parent].depth + 1;
  }
  return it->second;
}

uint32_t StackTree::AddPath(std::span<const uint32_t> frames, int32_t rank, std::vector<uint32_t>* memo) {
  if (frames.empty()) return kRoot;
  uint32_t at = kRoot;
  TreeNode* root = &nodes_[kRoot];
  root->ranks.Add(rank);
  root->threads++;
  if (memo != nullptr && memo->size() < frames.size()) memo->resize(frames.size(), kRoot);
  for (size_t d = 0; d < frames.size(); ++d) {
    uint32_t f = frames[d];
    if (memo != nullptr) {
      uint32_t m = (*memo)[d];  // the root where there was none: never a child, so never taken
      bool same = m != kRoot && m < nodes_.size() && nodes_[m].parent == at && nodes_[m].frame == f;
      at = same ? m : Child(at, f);
      (*memo)[d] = at;
    } else {
      at = Child(at, f);
    }
    TreeNode& n = nodes_[at];
    n.ranks.Add(rank);
    n.threads++;
  }
  TreeNode& leaf = nodes_[at];
  leaf.end_ranks.Add(rank);
  return at;
}

void StackTree::Absorb(const StackTree& other, std::span<const uint32_t> frame_map) {
  // Nodes are created after their parents, so one pass in index order sees parents first.
  std::vector<uint32_t> here(other.nodes_.size());
  here[kRoot] = kRoot;
  for (uint32_t i = 0; i < other.nodes_.size(); ++i) {
    const TreeNode& o = other.nodes_[i];
    uint32_t at = i == kRoot ? kRoot : Child(here[o.parent], frame_map[o.frame]);
    here[i] = at;
    TreeNode& n = nodes_[at];
    n.ranks.Append(o.ranks);
    n.end_ranks.Append(o.end_ranks);
    n.threads += o.threads;
    n.main_ends |= o.main_ends;
  }
}

void StackTree::Finish(const FrameTable& frames) {
  for (TreeNode& n : nodes_) {
    n.ranks.Finish();
    n.end_ranks.Finish();
  }
  // Each node's children lie together in children_: counted, placed, then sorted in place.
  std::vector<uint32_t> start(nodes_.size() + 1, 0);
  for (uint32_t i = 1; i < nodes_.size(); ++i) start[nodes_[i].parent + 1]++;
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  children_.assign(nodes_.size() - 1, 0);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (uint32_t i = 1; i < nodes_.size(); ++i) children_[fill[nodes_[i].parent]++] = i;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    uint32_t* first = children_.data() + start[i];
    uint32_t* last = children_.data() + start[i + 1];
    // Alphabetical, as flamegraph.pl draws a sorted folded file: the SVG and the folded file agree.
    std::sort(first, last, [&](uint32_t a, uint32_t b) {
      const FrameInfo& fa = frames[nodes_[a].frame];
      const FrameInfo& fb = frames[nodes_[b].frame];
      std::string na = fa.Name(), nb = fb.Name();
      if (na != nb) return na < nb;
      return fa.Source() < fb.Source();
    });
    nodes_[i].children = std::span<const uint32_t>(first, last);
  }
  child_ = {};  // only needed while adding: its memory goes back
}

}  // namespace xtimer

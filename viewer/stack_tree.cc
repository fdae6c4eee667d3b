#include "viewer/stack_tree.h"

#include <algorithm>

namespace xtimer {
namespace {

void AppendOnce(std::vector<int32_t>& v, int32_t* last, int32_t rank) {
  if (*last == rank) return;
  *last = rank;
  v.push_back(rank);
}

}  // namespace

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
  AppendOnce(root->ranks, &root->last_rank, rank);
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
    AppendOnce(n.ranks, &n.last_rank, rank);
    n.threads++;
  }
  TreeNode& leaf = nodes_[at];
  AppendOnce(leaf.end_ranks, &leaf.last_end_rank, rank);
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
    n.ranks.insert(n.ranks.end(), o.ranks.begin(), o.ranks.end());
    n.end_ranks.insert(n.end_ranks.end(), o.end_ranks.begin(), o.end_ranks.end());
    n.threads += o.threads;
    n.main_ends |= o.main_ends;
    n.last_rank = n.last_end_rank = -1;
  }
}

void StackTree::Finish(const FrameTable& frames) {
  for (TreeNode& n : nodes_) {
    std::sort(n.ranks.begin(), n.ranks.end());
    n.ranks.erase(std::unique(n.ranks.begin(), n.ranks.end()), n.ranks.end());
    std::sort(n.end_ranks.begin(), n.end_ranks.end());
    n.end_ranks.erase(std::unique(n.end_ranks.begin(), n.end_ranks.end()), n.end_ranks.end());
    n.children.clear();
  }
  for (uint32_t i = 1; i < nodes_.size(); ++i) nodes_[nodes_[i].parent].children.push_back(i);
  // Alphabetical, as flamegraph.pl draws a sorted folded file: the SVG and the folded file agree.
  for (TreeNode& n : nodes_) {
    std::sort(n.children.begin(), n.children.end(), [&](uint32_t a, uint32_t b) {
      const FrameInfo& fa = frames[nodes_[a].frame];
      const FrameInfo& fb = frames[nodes_[b].frame];
      std::string na = fa.Name(), nb = fb.Name();
      if (na != nb) return na < nb;
      return fa.Source() < fb.Source();
    });
  }
  child_.clear();  // only needed while adding
}

}  // namespace xtimer

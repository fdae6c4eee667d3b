// The prefix tree of one kind of stack (Python or native) over all ranks: each thread's stack,
// root first, is a path from the root; each node keeps the ranks whose stacks pass through it and
// the ranks that have a thread whose stack ends exactly there (the folded file's lines).
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <span>
#include <vector>

#include "viewer/frame_table.h"
#include "viewer/rank_list.h"

namespace xtimer {

struct TreeNode {
  uint32_t frame = 0;                  // id in the FrameTable; unused for the root
  uint32_t parent = 0;                 // the root is its own parent
  uint32_t depth = 0;                  // root 0, a stack's first frame 1
  uint32_t threads = 0;                // threads of all ranks passing through
  RankList ranks;                      // ranks passing through; ascending after Finish
  RankList end_ranks;                  // ranks with a stack ending here; ascending after Finish
  std::span<const uint32_t> children;  // after Finish: ordered by name (a view into the tree)
  bool main_ends = false;              // some rank's main thread ends here
};

class StackTree {
 public:
  static constexpr uint32_t kRoot = 0;

  StackTree();
  // Nodes view the tree's arrays: a tree moves, it is not copied.
  StackTree(const StackTree&) = delete;
  StackTree& operator=(const StackTree&) = delete;
  StackTree(StackTree&&) = default;
  StackTree& operator=(StackTree&&) = default;

  // One thread's stack for rank; frames are FrameTable ids, root first. Returns the node where it
  // ends (kRoot for an empty stack, which is otherwise ignored).
  // memo (optional): the nodes of a path added before, by depth, updated to this path's. Where
  // this path runs through the same nodes (as a thread of the next rank mostly does), they are
  // found without a lookup.
  uint32_t AddPath(std::span<const uint32_t> frames, int32_t rank, std::vector<uint32_t>* memo = nullptr);
  // A rank's main thread ends at this node (AddPath's result); nothing for kRoot.
  void MarkMainEnd(uint32_t node) {
    if (node != kRoot) nodes_[node].main_ends = true;
  }
  // Adds every path of other, whose frame ids are translated by frame_map (other id -> our id).
  // The two trees must hold different ranks.
  void Absorb(const StackTree& other, std::span<const uint32_t> frame_map);
  // Sorts the rank lists and builds the children lists (ordered by frame name, then source).
  void Finish(const FrameTable& frames);
  // Room for `more` nodes beyond those there are (an upper bound of what the next paths add):
  // one allocation of what is needed instead of doubling, whose last copy held 1.5x to 3x the
  // nodes while it ran (grows by half at least, so many small reserves stay linear).
  void Reserve(size_t more);

  const TreeNode& node(uint32_t i) const { return nodes_[i]; }
  const std::vector<TreeNode>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.size() == 1; }

 private:
  uint32_t Child(uint32_t parent, uint32_t frame);

  std::vector<TreeNode> nodes_;
  std::vector<uint32_t> children_;                 // every node's children, one after another (Finish)
  absl::flat_hash_map<uint64_t, uint32_t> child_;  // (parent << 32 | frame) -> node, while adding
};

}  // namespace xtimer

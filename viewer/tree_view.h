// What the renderers draw of one prefix tree: each node's full label and its width (the folded
// count of the stacks below it), after the optional collapse of idle threads. Folded file, flame
// graph, call tree and speedscope file all read the same view, so they agree with each other.
//
// Labels are made when asked (Label), not kept: a tree of a million frames would hold a million
// strings (90 MB for 1.35 M short unsymbolised labels, viewer/README.md), and each renderer needs
// each node's label about once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viewer/merged_stacks.h"

namespace xtimer {

struct ViewOptions {
  // Hide the stacks that every reported rank has, ending in the same idle wait (a pool on a
  // condition variable, a thread in epoll): they are the same everywhere and tell nothing.
  bool collapse_idle = false;
};

struct TreeView {
  const MergedStacks* merged = nullptr;
  const StackTree* tree = nullptr;
  std::vector<uint32_t> self;     // per node: ranks whose (shown) stack ends here
  std::vector<uint64_t> total;    // per node: self of the node and all below it
  std::vector<uint32_t> split;    // per node: 1 when its ranks are fewer than its parent's
  uint32_t collapsed_stacks = 0;  // stacks hidden by collapse_idle (each counted once)

  // The node's label, func@source@stuck|leak (FrameLabel); "" for the root.
  std::string Label(uint32_t node) const;
};

TreeView MakeTreeView(const MergedStacks& merged, const StackTree& tree, const ViewOptions& options);

// Whether a frame looks like a thread parked waiting for work (used by collapse_idle).
bool IsIdleWaitFrame(const FrameInfo& frame);

}  // namespace xtimer

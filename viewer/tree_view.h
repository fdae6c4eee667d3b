// What the renderers draw of one prefix tree: each node's full label and its width (the folded
// count of the stacks below it), after the optional collapse of idle threads. Folded file, flame
// graph, call tree and speedscope file all read the same view, so they agree with each other.
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
  std::vector<std::string> label;  // per node: func@source@stuck|leak ("" for the root)
  std::vector<uint32_t> self;      // per node: ranks whose (shown) stack ends here
  std::vector<uint64_t> total;     // per node: self of the node and all below it
  std::vector<uint32_t> split;     // per node: 1 when its ranks are fewer than its parent's
  uint32_t collapsed_stacks = 0;   // stacks hidden by collapse_idle (each counted once)
};

TreeView MakeTreeView(const MergedStacks& merged, const StackTree& tree, const ViewOptions& options);

// Whether a frame looks like a thread parked waiting for work (used by collapse_idle).
bool IsIdleWaitFrame(const FrameInfo& frame);

}  // namespace xtimer

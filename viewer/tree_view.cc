#include "viewer/tree_view.h"

#include <array>

#include "viewer/frame_label.h"

namespace xtimer {

bool IsIdleWaitFrame(const FrameInfo& f) {
  static constexpr std::array<std::string_view, 18> kNative = {"pthread_cond_wait",
                                                               "pthread_cond_timedwait",
                                                               "pthread_cond_clockwait",
                                                               "__futex_abstimed_wait_common",
                                                               "__futex_abstimed_wait_common64",
                                                               "futex_wait",
                                                               "syscall",
                                                               "epoll_wait",
                                                               "epoll_pwait",
                                                               "poll",
                                                               "ppoll",
                                                               "select",
                                                               "pselect",
                                                               "nanosleep",
                                                               "clock_nanosleep",
                                                               "sem_wait",
                                                               "sem_timedwait",
                                                               "accept"};
  // Python: threading.Condition.wait, queue.Queue.get, selectors, socket accept.
  static constexpr std::array<std::string_view, 6> kPython = {
      "wait", "get", "select", "accept", "_wait_for_tstate_lock", "poll"};
  std::string_view name = f.function;
  if (f.origin == FrameInfo::Origin::kPython) {
    for (std::string_view p : kPython)
      if (name == p) return true;
    return false;
  }
  for (std::string_view n : kNative)
    if (name == n || (name.size() > n.size() && name.substr(0, n.size()) == n && name[n.size()] == '@')) return true;
  return name.find("::wait") != std::string_view::npos && name.find("condition_variable") != std::string_view::npos;
}

std::string TreeView::Label(uint32_t n) const {
  if (n == StackTree::kRoot) return "";
  const TreeNode& node = tree->node(n);
  return FrameLabel(merged->frames[node.frame], RankSet(node.ranks), merged->world_size);
}

TreeView MakeTreeView(const MergedStacks& m, const StackTree& tree, const ViewOptions& options) {
  TreeView v;
  v.merged = &m;
  v.tree = &tree;
  size_t n = tree.size();
  v.self.resize(n);
  v.total.assign(n, 0);
  v.split.assign(n, 0);
  const size_t reported = m.ranks.size();
  for (uint32_t i = 1; i < n; ++i) {
    const TreeNode& node = tree.node(i);
    v.self[i] = static_cast<uint32_t>(node.end_ranks.size());
    v.split[i] = node.ranks.size() < tree.node(node.parent).ranks.size() ? 1 : 0;
    if (options.collapse_idle && v.self[i] == reported && reported > 0 && !node.main_ends) {
      // The deepest real frame (below any state / GIL / thread name marker) must be an idle wait,
      // and the thread must be sleeping (no state marker other than S).
      uint32_t at = i;
      bool sleeping = true;
      for (; at != StackTree::kRoot && m.frames[tree.node(at).frame].origin == FrameInfo::Origin::kSynthetic;
           at = tree.node(at).parent) {
        const FrameInfo& f = m.frames[tree.node(at).frame];
        if (f.file != kThreadNameSource && f.function.rfind("[S:", 0) != 0 && f.function != "[holds GIL]")
          sleeping = false;
      }
      if (at != StackTree::kRoot && sleeping && IsIdleWaitFrame(m.frames[tree.node(at).frame])) {
        v.self[i] = 0;
        ++v.collapsed_stacks;
      }
    }
  }
  // Children come after their parents, so one backward pass sums the subtrees.
  for (uint32_t i = static_cast<uint32_t>(n); i-- > 0;) {
    v.total[i] += v.self[i];
    if (i != StackTree::kRoot) v.total[tree.node(i).parent] += v.total[i];
  }
  return v;
}

}  // namespace xtimer

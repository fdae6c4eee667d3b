// Marks the current thread as inside a hooked call. Hooks reached from inside another hook
// (the CUDA runtime launching through the driver, cuBLAS or NCCL launching their kernels, our
// own event records) pass straight through, so one user-visible operation is timed once.
#pragma once

namespace xtimer {

// initial-exec: the library is always loaded at start-up (LD_PRELOAD), so its TLS is static
// and reading it costs one instruction instead of a __tls_get_addr call.
inline thread_local int t_hook_depth __attribute__((tls_model("initial-exec"))) = 0;

class HookGuard {
 public:
  HookGuard() { ++t_hook_depth; }
  ~HookGuard() { --t_hook_depth; }
  HookGuard(const HookGuard&) = delete;
  HookGuard& operator=(const HookGuard&) = delete;
  // True when this guard is the outermost one on the thread.
  static bool Outermost() { return t_hook_depth == 1; }
};

inline bool InsideHook() { return t_hook_depth > 0; }

}  // namespace xtimer

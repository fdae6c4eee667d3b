// CUDA graph capture awareness. Ops enqueued into a capturing stream do not run (they become
// graph nodes), so they are not timed; and the poller switches its own thread to the relaxed
// capture mode so that its event queries cannot invalidate a capture in progress elsewhere.
#pragma once

#include <atomic>

#include "preload/base/own_gpu_calls.h"

namespace xtimer {

// Captures begun and not ended in the process: counted by the capture hooks, and in CUPTI mode
// also by CUPTI's callbacks (which see the driver's and a static runtime's captures too; a
// hooked capture then counts twice). Only whether it is 0 matters.
inline std::atomic<int> g_active_captures{0};

// Cheap when no capture is active (one relaxed load); otherwise asks the runtime.
bool StreamIsCapturingSlow(void* stream, gpu::Path path, bool per_thread);
inline bool StreamIsCapturing(void* stream, gpu::Path path, bool per_thread) {
  if (g_active_captures.load(std::memory_order_relaxed) == 0) [[likely]]
    return false;
  return StreamIsCapturingSlow(stream, path, per_thread);
}

// For the library's own threads.
void UseRelaxedCaptureModeOnThisThread();

}  // namespace xtimer

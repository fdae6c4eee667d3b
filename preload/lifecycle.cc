// Process-level glue: fork handling. Nothing else runs at load time; the tracker (and its
// threads) start at the first hooked CUDA call.
#include <pthread.h>

#include "preload/tracker.h"

namespace {

__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, [] { xtimer::Tracker::AfterForkInChild(); });
}

}  // namespace

// libxtimer_cupti_handover.so: the CUPTI entry points another client takes CUPTI with, preloaded
// beside libxtimer_preload.so (base/cupti_handover.h says why apart). torch 2.15's Kineto, when a
// trace with CUDA activities starts, registers its clock (cuptiActivityRegisterTimestampCallback),
// its buffer callbacks and enables its kinds (seen with SIMGPU_LOG=1 on the simulated libcupti),
// and may detach CUPTI with cuptiFinalize once done; Kineto's callback API and other tools
// subscribe first. CUPTI serves one subscriber and one set of buffer callbacks per process, so
// before the call goes on to the real libcupti the preload lets go of CUPTI if it holds it: the
// profiler gets CUPTI and its trace, and the preload goes on timing with event pairs.
//
// Only calls made by others arrive here: the preload's own CUPTI calls use the functions it found
// with dlsym in the libcupti it opened. A client that finds CUPTI with dlopen + dlsym itself
// bypasses these entry points: it is refused the slot while the preload holds it, and its
// Activity API calls would take the preload's buffers unseen.
//
// Threads: the callers'. No lock: two atomics, read and written sequentially consistent.
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>

#include "preload/base/cupti_handover.h"

#define XTIMER_HANDOVER_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<bool> g_other_client{false};  // a CUPTI entry point was called here
std::atomic<xtimer::CuptiHandOverFn> g_hand_over{nullptr};

// Before `entry_point` goes on: counted, and handed to the preload once it registered.
void Before(const char* entry_point) {
  g_other_client.store(true);
  if (xtimer::CuptiHandOverFn fn = g_hand_over.load()) fn(entry_point);
}

// The real libcupti's `name` (the next definition after this library), or nullptr.
template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

#define XTIMER_CUPTI_FORWARD(fn, ...)                  \
  Before(#fn);                                         \
  static const auto real = Real<decltype(&::fn)>(#fn); \
  return real != nullptr ? real(__VA_ARGS__) : CUPTI_ERROR_NOT_INITIALIZED

XTIMER_HANDOVER_EXPORT int xtimer_cupti_handover_register(xtimer::CuptiHandOverFn fn) {
  g_hand_over.store(fn);
  return g_other_client.load() ? 1 : 0;
}

XTIMER_HANDOVER_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                                  void* userdata) {
  XTIMER_CUPTI_FORWARD(cuptiSubscribe, subscriber, callback, userdata);
}

XTIMER_HANDOVER_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                                  CUpti_BuffersCallbackCompleteFunc completed) {
  XTIMER_CUPTI_FORWARD(cuptiActivityRegisterCallbacks, requested, completed);
}

XTIMER_HANDOVER_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  XTIMER_CUPTI_FORWARD(cuptiActivityEnable, kind);
}

XTIMER_HANDOVER_EXPORT CUptiResult cuptiFinalize() {
  Before("cuptiFinalize");
  static const auto real = Real<decltype(&::cuptiFinalize)>("cuptiFinalize");
  return real != nullptr ? real() : CUPTI_ERROR_NOT_INITIALIZED;
}

// Handed over before the clock changes: the records the preload still has are on the old one.
XTIMER_HANDOVER_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc timestamp) {
  XTIMER_CUPTI_FORWARD(cuptiActivityRegisterTimestampCallback, timestamp);
}

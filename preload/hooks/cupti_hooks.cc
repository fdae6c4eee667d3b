// The CUPTI entry points another client takes CUPTI with. torch 2.15's Kineto, when a trace with
// CUDA activities starts, registers its clock (cuptiActivityRegisterTimestampCallback), its buffer
// callbacks and enables its kinds (seen with SIMGPU_LOG=1 on the simulated libcupti), and may detach
// CUPTI with cuptiFinalize once done; Kineto's callback API and other tools subscribe first.
// CUPTI serves one subscriber and one set of buffer callbacks per process, so before the call goes
// on to the real libcupti the library lets go of CUPTI if it holds it (cupti_backend.h, HandOver):
// the profiler gets CUPTI and its trace, and the library goes on timing with event pairs.
//
// Only calls made by others arrive here: the library's own CUPTI calls use the functions it found
// with dlsym in the libcupti it opened. A client that finds CUPTI with dlopen + dlsym itself
// bypasses these hooks: it is refused the slot while the library holds it, and its Activity API
// calls would take the library's buffers unseen.
#include <cupti.h>

#include "preload/base/real_function.h"
#include "preload/timing/cupti_backend.h"

namespace {

XTIMER_REAL(kCupti, cuptiSubscribe);
XTIMER_REAL(kCupti, cuptiActivityRegisterCallbacks);
XTIMER_REAL(kCupti, cuptiActivityEnable);
XTIMER_REAL(kCupti, cuptiFinalize);
XTIMER_REAL(kCupti, cuptiActivityRegisterTimestampCallback);

}  // namespace

XTIMER_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                         void* userdata) {
  xtimer::cupti::HandOver("cuptiSubscribe");
  auto fn = real_cuptiSubscribe.get_or_report();
  return fn != nullptr ? fn(subscriber, callback, userdata) : CUPTI_ERROR_NOT_INITIALIZED;
}

XTIMER_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                         CUpti_BuffersCallbackCompleteFunc completed) {
  xtimer::cupti::HandOver("cuptiActivityRegisterCallbacks");
  auto fn = real_cuptiActivityRegisterCallbacks.get_or_report();
  return fn != nullptr ? fn(requested, completed) : CUPTI_ERROR_NOT_INITIALIZED;
}

XTIMER_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  xtimer::cupti::HandOver("cuptiActivityEnable");
  auto fn = real_cuptiActivityEnable.get_or_report();
  return fn != nullptr ? fn(kind) : CUPTI_ERROR_NOT_INITIALIZED;
}

XTIMER_EXPORT CUptiResult cuptiFinalize() {
  xtimer::cupti::HandOver("cuptiFinalize");
  auto fn = real_cuptiFinalize.get_or_report();
  return fn != nullptr ? fn() : CUPTI_ERROR_NOT_INITIALIZED;
}

XTIMER_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc timestamp) {
  // Before the clock changes: the records the library still has are on the old one.
  xtimer::cupti::HandOver("cuptiActivityRegisterTimestampCallback");
  auto fn = real_cuptiActivityRegisterTimestampCallback.get_or_report();
  return fn != nullptr ? fn(timestamp) : CUPTI_ERROR_NOT_INITIALIZED;
}

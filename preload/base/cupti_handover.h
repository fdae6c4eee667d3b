// Between libxtimer_preload.so and libxtimer_cupti_handover.so (hooks/cupti_handover.cc), the
// second library xtimer_launch and xtimer_run preload: it alone exports the CUPTI entry points a
// profiler takes CUPTI with, so that libxtimer_preload.so exports its CUDA, cuBLAS and NCCL hooks
// only. Before each such call goes on to the real libcupti, it calls the function the preload
// registered, which lets go of CUPTI (timing/cupti_backend.h, HandOver).
//
// The preload finds the registration with dlsym(RTLD_DEFAULT, kCuptiHandoverRegister) when it
// starts CUPTI; without the second library (preloaded alone, by hand) there is none, and a later
// profiler takes CUPTI's buffers unseen.
#pragma once

namespace xtimer {

// Called on the other client's thread, before its call of `entry_point` reaches libcupti.
using CuptiHandOverFn = void (*)(const char* entry_point);

// int xtimer_cupti_handover_register(CuptiHandOverFn): stores the function (later calls go to
// it) and returns 1 when another client called a CUPTI entry point before, 0 otherwise. Any
// thread; a call racing it either reaches the function or is counted in the result, or both.
using CuptiHandoverRegisterFn = int (*)(CuptiHandOverFn);
inline constexpr const char kCuptiHandoverRegister[] = "xtimer_cupti_handover_register";

}  // namespace xtimer

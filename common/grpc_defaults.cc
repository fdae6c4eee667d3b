#include "common/grpc_defaults.h"

#include <absl/synchronization/mutex.h>

namespace xtimer {

void UseGrpcDefaults() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace xtimer

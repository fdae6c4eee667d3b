// SIMGPU_* environment parsing (test-only knobs, documented in tests/simgpu/README.md).
#pragma once
#include <cstdint>

namespace simgpu {

// The variable as a double, or `def` when unset or unparsable.
double env_double(const char* name, double def);
// The variable as an integer, or `def` when unset or unparsable.
int64_t env_int(const char* name, int64_t def);
// Writes "[simgpu <pid>] ..." to stderr when SIMGPU_LOG is set to a non-zero value.
void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace simgpu

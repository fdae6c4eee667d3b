// Driver entry points we hook, also when they are looked up by name (dlsym on libcuda, or
// cuGetProcAddress): the runtime, NCCL's static runtime, cuBLAS and Triton launch this way.
#pragma once

namespace xtimer {

// Whether `name` is one of the driver functions we hook.
bool IsHookedDriverName(const char* name);
// For a hooked name: remembers `real` as the real address and returns our hook; else nullptr.
void* DriverHookFor(const char* name, void* real);

}  // namespace xtimer

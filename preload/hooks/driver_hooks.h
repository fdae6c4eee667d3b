// Driver entry points we hook, also when they are looked up by name through cuGetProcAddress.
#pragma once

namespace xtimer {

// For a hooked name: remembers `real` as the real address and returns our hook; else nullptr.
void* DriverHookFor(const char* name, void* real);

}  // namespace xtimer

// Library loaded before rtld_next_second: looks up the next definition of xt_probe_value with
// dlsym(RTLD_NEXT). The preloaded library must leave this alone: were it to interpose dlsym
// without preserving the caller, the lookup would start after it and find this library's own
// definition.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) int xt_probe_value() { return 1; }

extern "C" __attribute__((visibility("default"))) int xt_probe_next_value() {
  auto next = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "xt_probe_value"));
  return next != nullptr ? next() : -1;
}

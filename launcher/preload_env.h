// LD_PRELOAD for the processes xtimer_launch and xtimer_run start: libxtimer_preload.so first,
// whatever the user preloads after it, never twice; and with XTIMER_PYTHON_HOOKS, the Python hook
// module's folder (xtimer-site, beside the library) first on PYTHONPATH.
#pragma once

#include <string>

namespace xtimer {

// Finds the library (XTIMER_PRELOAD_LIB, else ../lib/ beside this executable) and sets
// LD_PRELOAD (and PYTHONPATH) in this process' environment, to be inherited. False with *error (one line, naming
// the path and what to do) when the library cannot be read.
bool SetPreloadEnvironment(std::string* error);

}  // namespace xtimer

// LD_PRELOAD for the processes xtimer_launch and xtimer_run start: libxtimer_preload.so first
// (with libxtimer_cupti_handover.so beside it, when there), whatever the user preloads after it,
// never twice; and with XTIMER_PYTHON_HOOKS, the Python hook
// module's folder (xtimer-site, beside the library) first on PYTHONPATH.
#pragma once

#include <string>
#include <vector>

namespace xtimer {

// Finds the library (XTIMER_PRELOAD_LIB, else ../lib/ beside this executable) and gives the
// variables that preload a child, as KEY=VALUE: LD_PRELOAD (and PYTHONPATH), from this process'
// values, which stay as they are. False with *error (one line, naming the path and what to do)
// when the library cannot be read. xtimer_run puts them in its workers' environments.
bool PreloadVariables(std::vector<std::string>* vars, std::string* error);

// The same variables, set in this process' environment to be inherited (xtimer_launch, which
// becomes its command's parent).
bool SetPreloadEnvironment(std::string* error);

}  // namespace xtimer

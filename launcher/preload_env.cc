#include "launcher/preload_env.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/env.h"

namespace xtimer {
namespace {

// <dir of this executable>/../lib/libxtimer_preload.so, unless XTIMER_PRELOAD_LIB says otherwise.
std::string PreloadPath() {
  std::string configured = xtimer::env::String("XTIMER_PRELOAD_LIB");
  if (!configured.empty()) return configured;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "libxtimer_preload.so";
  exe[n] = '\0';
  std::string dir(exe);
  dir.erase(dir.rfind('/'));
  return dir + "/../lib/libxtimer_preload.so";
}

}  // namespace

bool SetPreloadEnvironment(std::string* error) {
  char resolved[PATH_MAX];
  std::string lib = PreloadPath();
  if (realpath(lib.c_str(), resolved) == nullptr || access(resolved, R_OK) != 0) {
    *error = "cannot read the preload library " + lib + " (" + std::strerror(errno) +
             "); build it (scripts/test.sh) or set XTIMER_PRELOAD_LIB";
    return false;
  }
  // Prepend, keeping what the user preloads; a nested xtimer_launch does not add it twice.
  std::string preload = resolved;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0') {
    if (std::strstr(old, resolved) != nullptr) {
      preload = old;
    } else {
      preload += ":";
      preload += old;
    }
  }
  setenv("LD_PRELOAD", preload.c_str(), 1);
  return true;
}

}  // namespace xtimer

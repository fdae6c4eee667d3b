#include "common/simgpu_env.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace simgpu {

double env_double(const char* name, double def) {
  const char* v = getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  double d = strtod(v, &end);
  return (end && *end == '\0') ? d : def;
}

int64_t env_int(const char* name, int64_t def) {
  const char* v = getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  long long n = strtoll(v, &end, 0);
  return (end && *end == '\0') ? int64_t(n) : def;
}

void log(const char* fmt, ...) {
  static const bool on = env_int("SIMGPU_LOG", 0) != 0;
  if (!on) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[simgpu %d] %s\n", int(getpid()), buf);
}

}  // namespace simgpu

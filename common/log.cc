#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace xtimer {
namespace {

// Read directly (not through env::) so that env.cc can log its own parse errors.
int ThresholdFromEnv() {
  const char* v = std::getenv("XTIMER_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return static_cast<int>(LogLevel::kInfo);
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (strcasecmp(v, kNames[i]) == 0) return i;
  return static_cast<int>(LogLevel::kInfo);
}

int Threshold() {
  static std::atomic<int> threshold{-1};
  int t = threshold.load(std::memory_order_relaxed);
  if (t < 0) {
    t = ThresholdFromEnv();
    threshold.store(t, std::memory_order_relaxed);
  }
  return t;
}

}  // namespace

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= Threshold(); }

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level)) return;
  static const char* kTags[] = {"error: ", "warning: ", "", "debug: "};
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "xtimer[%d]: %s", static_cast<int>(getpid()),
                        kTags[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = n + (m < 0 ? 0 : (m >= static_cast<int>(sizeof buf) - n - 1 ? sizeof buf - n - 2 : m));
  buf[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, buf, len);
  (void)ignored;
}

}  // namespace xtimer

#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "common/env.h"

namespace xtimer {
namespace {

// Parsed by common/env (the one parser of XTIMER_*), without env's own reporting: that reports
// through Log, which needs the level first. A bad value is reported here, once.
int ThresholdFromEnv(bool* bad) {
  *bad = false;
  const char* v = std::getenv("XTIMER_LOG_LEVEL");
  int level = static_cast<int>(LogLevel::kInfo);
  env::ParseLogLevel(env::Default("XTIMER_LOG_LEVEL"), &level);
  if (v == nullptr || *v == '\0') return level;
  if (!env::ParseLogLevel(v, &level)) *bad = true;
  return level;
}

int Threshold() {
  static std::atomic<int> threshold{-1};
  int t = threshold.load(std::memory_order_relaxed);
  if (t < 0) {
    bool bad = false;
    t = ThresholdFromEnv(&bad);
    int unset = -1;
    // Only the thread that sets it reports a bad value, so the warning comes once.
    if (threshold.compare_exchange_strong(unset, t, std::memory_order_relaxed) && bad)
      Log(LogLevel::kWarn, "XTIMER_LOG_LEVEL=%.64s is not error, warn, info or debug; using the default %s",
          std::getenv("XTIMER_LOG_LEVEL"), env::Default("XTIMER_LOG_LEVEL"));
  }
  return t;
}

}  // namespace

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= Threshold(); }

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level)) return;
  static const char* kTags[] = {"error: ", "warning: ", "", "debug: "};
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "xtimer[%d]: %s", static_cast<int>(getpid()), kTags[static_cast<int>(level)]);
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

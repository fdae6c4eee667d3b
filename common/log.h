// One-line messages on stderr, prefixed "xtimer[pid]: ". Safe to call from any thread
// (a single write(2) per message); never allocates. Not async-signal-safe (vsnprintf).
#pragma once

namespace xtimer {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Messages above XTIMER_LOG_LEVEL (read once) are dropped.
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
bool LogEnabled(LogLevel level);

}  // namespace xtimer

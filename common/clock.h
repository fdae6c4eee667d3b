// Clocks and the one time format files use (UTC, ISO 8601, milliseconds). Durations and deadlines
// take the monotonic clock; times that leave the process take the wall clock.
#pragma once

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace xtimer {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

inline uint64_t WallNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// Seconds on CLOCK_MONOTONIC, for deadlines and durations: it never jumps when the wall clock is
// set, and is the clock of std::chrono::steady_clock (libstdc++) and of the preload's records.
inline double MonotonicS() { return static_cast<double>(MonotonicNs()) * 1e-9; }

// Milliseconds since the Unix epoch, for times another program or machine reads (a report's
// time, torchrun's error file): only the wall clock means the same there.
inline int64_t WallMs() { return static_cast<int64_t>(WallNs() / 1000000ull); }

// "2026-11-22T10:15:30.123Z"
inline std::string IsoUtc(uint64_t wall_ns) {
  time_t secs = static_cast<time_t>(wall_ns / 1000000000ull);
  tm t;
  gmtime_r(&secs, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>((wall_ns / 1000000ull) % 1000));
  return buf;
}

}  // namespace xtimer

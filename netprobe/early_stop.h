// Early stop: a test that is clearly slower than the tests around it is stopped before it has
// moved all its bytes, and judged from the rate it reached. Pure logic; no sockets, no clocks.
//
// The rule (README.md, "Early stop"): the rendezvous stops a running test of a step when
//  - a test of the step completed (the yardstick: the median time of the completed tests), and
//  - every test of the step still running has run longer than both straggler_factor x that
//    median and kMinStopS (while one is within it, the step waits for that one anyway).
// At that point its time is already over the factor (it would be judged slow anyway); going on
// only measures a rate that the bytes moved so far already tell.
//
// A stopped test reports, per direction, the bytes the receiver had and the seconds it took
// (StoppedTransfer). PartialResult turns that into the figures the judge takes: the rate of each
// direction, a direction never started taken at the other one's rate, and the time the whole
// test would have taken at those rates. A test stopped before a byte arrived has failed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "netprobe/judge.h"

namespace xtimer::netprobe {

// Never stop a test that has run less than this: short tests are cheap, and a rate needs time.
inline constexpr double kMinStopS = 1.0;
// A stopped transfer is measured for at least this long (node side), so that its byte count
// is more than a socket buffer's worth of noise.
inline constexpr double kMinSampleS = 0.5;

// One test of a step, as the rendezvous sees it.
struct RunningTest {
  bool ended = false;      // its result is in (or it was given up on)
  bool completed = false;  // ended with figures
  bool stopping = false;   // told to stop already
  double elapsed_s = 0;    // from the start of the test to its end (ended) or to now
};

// The tests (indices into `step`) to tell to stop now. `factor` is the straggler factor.
std::vector<size_t> TestsToStop(const std::vector<RunningTest>& step, double factor);

// What the initiator of a stopped test reports: per direction, the bytes that had reached the
// receiver and the receiver's seconds for them (0 and 0: that direction never started).
struct StoppedTransfer {
  int64_t size = 0;  // bytes per direction the test was meant to move
  int64_t fwd_bytes = 0, bwd_bytes = 0;
  double fwd_s = 0, bwd_s = 0;
};

// Checks the figures (false with *error naming the field when they cannot be a transfer of
// `size`), then fills *t: completed with projected time_s and rates, or failed when no byte moved
// forward; t->stopped and t->stop_note say what was measured.
bool PartialResult(const StoppedTransfer& s, double stopped_after_s, TestResult* t, std::string* error);

}  // namespace xtimer::netprobe

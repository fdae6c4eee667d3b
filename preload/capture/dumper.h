// The stack dumper of the preloaded library: on a hang, a request or the dump signal it writes
// <XTIMER_TIMELINE_PATH>/<rank:05d>-<world:05d>.stacktrace (docs/formats.md, "Stack file") with
// every thread's native and Python frames and the in-flight ops, then starts xtimer_symbolize on it.
//
//   capture::Dumper::Instance().Start(&my_provider);      // once, from normal code (not a handler)
//   capture::Dumper::Instance().RequestDump(Reason::kHang); // anywhere, even in a signal handler
//
// All work happens on one dedicated thread ("xtimer-dump"), started by Start(), or by the dump
// signal's handler in a process that called InstallAtLoad() and has not started it yet (a
// process that has made no CUDA call). Requests that arrive while a dump runs are merged into
// one more dump. After fork() the child has no dumper thread and no pending requests; the dump
// signal never kills it and starts nothing there (its file would replace its parent's); Start()
// (or DumpAndWait) in the child starts a fresh one. Nothing here throws.
#pragma once

#include <cstdint>
#include <string>

#include "preload/base/inflight_op.h"
#include "preload/capture/stack_dump.h"

namespace xtimer::capture {

// Implemented by the preload (the watchdog). Called on the dumper thread during a dump: must
// not block on a lock a stuck thread could hold (use try-locks or lock-free snapshots).
class DumpProvider {
 public:
  virtual ~DumpProvider() = default;
  virtual RankInfo GetRankInfo() = 0;
  virtual InflightOps GetInflightOps() = 0;
  // One line on what was found stuck (for reason hang); "" for none.
  virtual std::string Trigger() { return {}; }
};

struct DumperOptions {
  // Empty: XTIMER_TIMELINE_PATH.
  std::string timeline_path;
  // Empty: <dir of the library holding this code>/../bin/xtimer_symbolize; "none": never spawn.
  std::string symbolizer;
  // Longest wait for one thread's capture handler.
  int thread_timeout_ms = 200;
  // Install the XTIMER_DUMP_SIGNAL handler (when the program has none).
  bool install_dump_signal = true;
};

struct DumpStats {
  uint64_t dumps = 0;               // dumps completed so far
  std::string path;                 // file of the last dump ("" if it could not be written)
  std::string error;                // why not, if so
  int threads = 0;                  // threads listed
  int captured = 0;                 // threads with native frames
  int python_threads = 0;           // threads with Python frames
  double capture_ms = 0;            // interrupting every thread (+ Python frames)
  double total_ms = 0;              // whole dump, file written
  double max_stop_us = 0;           // longest time one thread spent in the capture handler
  double max_roundtrip_us = 0;      // longest signal-sent-to-result time for one thread
  bool symbolizer_started = false;  // started, or queued behind the one still running
};

class Dumper {
 public:
  static Dumper& Instance();

  // At load (a constructor), in a process that must answer the dump signal before its first
  // CUDA call: creates the state, installs the dump signal handler when the program has none
  // (XTIMER_DUMP_SIGNAL) and the fork handler. Starts no thread and loads nothing (no libunwind,
  // no Python lookup). A dump signal that arrives before Start() starts the dumper thread from
  // the handler if the thread it interrupted is at a point where that cannot deadlock
  // (thread_start_point.h), else it asks again a moment later (a one-shot timer sending the
  // same signal: 10 ms, doubling up to 1 s). That thread sets up the capture itself, with
  // `symbolizer` (as DumperOptions::symbolizer), before its first dump. With `take_dumps` false
  // the signal is only kept from killing the process (a rank's helper process, whose file would
  // replace the rank's). Returns the dump signal installed (0: none). Not async-signal-safe.
  int InstallAtLoad(bool take_dumps, const std::string& symbolizer);

  // Sets everything up and starts the dumper thread; idempotent. Not async-signal-safe.
  // `provider` must outlive the process (may be null: rank from RANK/WORLD_SIZE/LOCAL_RANK,
  // no in-flight ops); a later call may set it. Options apply on the first call in a process;
  // if the dump signal's handler started the thread first, this call's symbolizer still applies.
  // False if dumps cannot work at all (the reason is logged once).
  bool Start(DumpProvider* provider, const DumperOptions& options = {});

  // Called on the dumper thread after every dump that wrote its file (null: none). For the
  // preload's link to the node agent before its own thread exists (agent_hello.h).
  void SetDumpObserver(void (*observer)(const DumpStats& stats));

  // Asks for a dump. Async-signal-safe (atomics and sem_post only): callable from a signal
  // handler or the watchdog. Returns a ticket for WaitForDump. Ignored until Start().
  uint64_t RequestDump(Reason reason);

  // Waits until a dump that began after `ticket` was requested has finished (not async-signal-safe).
  bool WaitForDump(uint64_t ticket, double timeout_s);
  // Start() if needed, RequestDump, WaitForDump. For hang action "abort" and tests.
  bool DumpAndWait(Reason reason, double timeout_s, DumpStats* stats = nullptr);

  DumpStats LastStats();
  // The dump signal actually installed (0 if none), and the capture signal.
  int dump_signal() const;
  int capture_signal() const;

  struct State;                  // internal (dumper.cc)
  constexpr Dumper() = default;  // use Instance()
  Dumper(const Dumper&) = delete;
  Dumper& operator=(const Dumper&) = delete;
};

}  // namespace xtimer::capture

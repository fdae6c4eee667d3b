// What the Python side tells the library: GC pauses and DataLoader waits of the rank's
// interpreter, and the Python call sites of collectives, through four exported C functions that
// the hook module (preload/steps/python/, put on PYTHONPATH by xtimer_launch and xtimer_run)
// calls with ctypes:
//
//   int  xtimer_python_hello(int abi, unsigned long main_thread);
//        which hooks are wanted, bits: kWantSpans (the library runs, XTIMER_STEPS is on),
//        kWantSites (XTIMER_DESYNC is on); 0 (also with XTIMER_PYTHON_HOOKS=0 or another abi):
//        the module installs nothing. main_thread: threading.main_thread().ident.
//   void xtimer_python_span(int kind, uint64_t begin_ns, uint64_t end_ns);
//        kind 1 = a GC pause (gc.callbacks start..stop), 2 = a DataLoader __next__ call;
//        CLOCK_MONOTONIC ns (time.monotonic_ns()).
//   unsigned xtimer_python_site_id(const char* text);
//        registers a call site, "func (file:line)" (preload/timing/call_sites.h); its id, 0 if
//        the table is full. Once per distinct site: the module keeps the ids.
//   unsigned xtimer_python_site(int which, unsigned id);
//        sets this thread's site (which 0: around a torch.distributed collective) or the
//        process' backward site (which 1: around torch.autograd.backward); returns the one it
//        replaced, which the module puts back when the call returns.
//
// A span goes into a bounded lock-free queue (one push, no lock, no allocation: the caller is
// the interpreter, maybe inside GC); the poller drains it into the step facts. Before the first
// CUDA call and in a forked child the queue is off and spans are dropped at once.
#pragma once

#include <cstdint>

namespace xtimer::python {

inline constexpr int kAbi = 2;
inline constexpr int kWantSpans = 1;
inline constexpr int kWantSites = 2;

struct Span {
  uint8_t kind = 0;  // SpanKind
  uint64_t begin_ns = 0, end_ns = 0;
};

// Tracker: start (true) or stop (false) taking spans.
void Enable(bool on);
// Poller: the next span, if any.
bool Pop(Span* out);
// pthread_t of the interpreter's main thread from the hello (0: unknown).
uint64_t MainThread();
// Spans refused because the queue was full.
uint64_t Dropped();

}  // namespace xtimer::python

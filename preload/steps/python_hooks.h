// What the Python side tells the library: GC pauses and DataLoader waits of the rank's
// interpreter, through two exported C functions that the hook module (preload/steps/python/, put on
// PYTHONPATH by xtimer_launch and xtimer_run) calls with ctypes:
//
//   int  xtimer_python_hello(int abi, unsigned long main_thread);
//        1: hooks wanted (the library runs, XTIMER_STEPS and XTIMER_PYTHON_HOOKS are on);
//        0: the module installs nothing. main_thread: threading.main_thread().ident.
//   void xtimer_python_span(int kind, uint64_t begin_ns, uint64_t end_ns);
//        kind 1 = a GC pause (gc.callbacks start..stop), 2 = a DataLoader __next__ call;
//        CLOCK_MONOTONIC ns (time.monotonic_ns()).
//
// A span goes into a bounded lock-free queue (one push, no lock, no allocation: the caller is
// the interpreter, maybe inside GC); the poller drains it into the step facts. Before the first
// CUDA call and in a forked child the queue is off and spans are dropped at once.
#pragma once

#include <cstdint>

namespace xtimer::python {

inline constexpr int kAbi = 1;

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

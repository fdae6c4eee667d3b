// Reading memory that other threads may change or free meanwhile (CPython's structures, read
// without the GIL, as faulthandler's own dumper does). While a FaultGuard lives, SIGSEGV and SIGBUS
// raised by the thread that made it jump back out of the read that faulted; a fault on any other
// thread meanwhile puts the previous action back and returns, so the fault repeats under it.
//
//   FaultGuard guard;                       // one at a time in the process: a second waits
//   bool ok = guard.Copy(&word, address, 8); // false: the read faulted (or no guard)
//   bool ok2 = guard.Run([&] { ... });       // false: something in fn faulted
//
// Run's function must not own anything that needs destroying when it is jumped out of.
#pragma once

#include <setjmp.h>

#include <cstddef>
#include <cstdint>

#include "common/mutex.h"

namespace xtimer::capture {

class FaultGuard {
 public:
  FaultGuard();
  ~FaultGuard();
  FaultGuard(const FaultGuard&) = delete;
  FaultGuard& operator=(const FaultGuard&) = delete;

  // Whether the handlers are in place (sigaction can fail); without them nothing is read.
  bool installed() const { return installed_; }
  // Copies n bytes from address; false if the read faulted.
  bool Copy(void* dst, uintptr_t address, size_t n);
  template <typename Fn>
  bool Run(Fn&& fn) {
    if (!installed_) return false;
    if (sigsetjmp(*Jump(), 0) != 0) return false;
    fn();
    return true;
  }

 private:
  static sigjmp_buf* Jump();
  // The handlers and the jump buffer are the process's: guards of two threads (the dumper and the
  // step sampler) take turns.
  MutexLock turn_;
  bool installed_ = false;
};

}  // namespace xtimer::capture

// Native stacks of every thread, taken from inside the process.
//
// Each thread is interrupted in turn by a real-time signal (XTIMER_CAPTURE_SIGNAL). Its handler
// records raw instruction pointers with libunwind into one preallocated slot, notes
// pthread_self() and (if Python is there) whether the thread holds the GIL, then wakes the dumper
// through a futex. The handler neither allocates nor takes a lock of ours; the dumper waits with a
// timeout, so a thread that blocks the signal, sits in uninterruptible sleep or exits meanwhile
// is listed as not captured and the dump goes on.
//
// What the interruption does to a thread blocked in a system call (the handler has SA_RESTART):
//  - restarted transparently, the caller never sees it: read/write on pipes, sockets without a
//    timeout and other slow devices, untimed futex waits (pthread_mutex_lock, pthread_cond_wait,
//    sem_wait, std::condition_variable::wait), wait4/waitpid, accept/connect/recv/send, flock,
//    fcntl(F_SETLKW), open of a FIFO (the kernel returns -ERESTARTSYS; SA_RESTART replays the call).
//  - failed with EINTR whatever the flags (the kernel's -ERESTARTNOHAND / -ERESTART_RESTARTBLOCK
//    become EINTR once a handler has run): poll/select/epoll_wait, nanosleep/clock_nanosleep,
//    timed futex waits, sockets with SO_RCVTIMEO/SO_SNDTIMEO, sigsuspend/sigtimedwait, semop.
//    These are documented to return EINTR on any signal and callers retry: glibc's
//    pthread_cond_timedwait treats it as a spurious wakeup and waits again, sleep_for loops on the
//    remaining time, Python retries every such call (PEP 475). sem_timedwait returns EINTR to its
//    caller, as POSIX allows. Any profiler that uses signals (SIGPROF) has the same effect.
//  - restarted by the kernel even without SA_RESTART: only -ERESTARTNOINTR calls, and
//    restart_syscall when no handler runs (stop/continue); not the case here.
//
// libunwind (libunwind.so.8, nongnu) is dlopen'ed RTLD_LOCAL at Init instead of being linked:
// it defines _Unwind_RaiseException & co., and as a dependency of an LD_PRELOAD library it would
// come before libgcc_s in the global scope of a C program (python3) and take over every C++
// exception thrown in the process. Loaded locally, its symbols are invisible to everyone else.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace xtimer::capture {

struct NativeStack {
  pid_t tid = 0;
  bool captured = false;
  std::string error;          // why not captured
  uint64_t pthread_id = 0;    // pthread_self() of the thread, 0 if unknown
  int holds_gil = -1;         // result of the GIL check in the thread, -1 if none ran
  bool truncated = false;     // more frames than the slot holds (the outermost are lost)
  std::vector<uint64_t> ips;  // innermost first; callers already moved back into the call (ip - 1),
                              // a signal trampoline and the frame it interrupted exact
  double stop_us = 0;         // time spent in the handler
  double roundtrip_us = 0;    // from sending the signal to seeing the result
};

class NativeCapture {
 public:
  static constexpr int kMaxFrames = 256;

  // Installs the handler for `signal` (a real-time signal the program does not use) and loads
  // libunwind. Without libunwind the handler still reports pthread ids and the GIL, with no frames.
  // Not async-signal-safe; call once. False (with *error) if the signal cannot be used.
  bool Init(int signal, std::string* error);
  bool unwinder_available() const;
  const std::string& unwinder_error() const { return unwinder_error_; }

  // int fn(void) run inside each interrupted thread (PyGILState_Check); must be async-signal-safe.
  void SetGilCheck(int (*fn)());

  // True while our handler is still the one installed for the signal.
  bool HandlerInstalled() const;

  // Captures `tids` one at a time (the calling thread directly, without a signal).
  // `timeout_ms` bounds the wait for each thread; `states` (optional, one per tid, from
  // /proc/.../stat) lets a thread in uninterruptible sleep ('D'), which cannot run the handler
  // until it leaves the kernel, cost only a short wait.
  void Capture(std::span<const pid_t> tids, int timeout_ms, std::vector<NativeStack>* out,
               std::span<const char> states = {});

  // In a child after fork: forget any capture that was in progress in the parent.
  void ResetAfterFork();

  int signal() const { return signal_; }

 private:
  void CaptureSelf(NativeStack* out);
  void CaptureOther(pid_t tid, int timeout_ms, NativeStack* out);

  int signal_ = 0;
  uint32_t generation_ = 0;
  std::string unwinder_error_;
};

}  // namespace xtimer::capture

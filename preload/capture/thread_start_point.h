// Whether a signal handler may start a thread, judged from where the thread it interrupted was.
//
// pthread_create is not async-signal-safe: it maps a stack, calloc()s the new thread's TLS
// vector on the calling thread's malloc arena and takes the loader's TLS lock. Run in a handler,
// it deadlocks only if the interrupted thread holds one of those locks, that is if it was
// stopped inside the C library, the dynamic loader or the allocator. It is safe when the thread
//  - was in a system call the signal interrupted (x86-64: returned -EINTR, or about to be
//    restarted by SA_RESTART in one of the blocking calls that hold no lock of libc's: read,
//    write, futex, wait4, accept, recv/send, connect, flock...), which is where a stuck process
//    sits (sleep, select, a lock, a pipe, a socket); or
//  - was running code outside the C library, the loader and the object that defines malloc
//    (a busy Python interpreter, the program's own loops).
// Anything else (in malloc, in dlopen, in pthread_create...) is answered "not now".
//
//   ThreadStartPoint::Init();  // at load: notes libc's, the loader's and malloc's code ranges
//   if (ThreadStartPoint::Safe(ucontext)) pthread_create(...);  // in the handler
//
// Init is not async-signal-safe (dl_iterate_phdr); Safe is (it reads registers, a static table
// and two bytes of libc's code). Before Init, Safe answers false. Other architectures than
// x86-64 have no system-call rule: there only the code-range rule applies.
#pragma once

namespace xtimer::capture {

class ThreadStartPoint {
 public:
  static void Init();
  static bool Safe(const void* ucontext);
};

}  // namespace xtimer::capture

#include "preload/capture/native_capture.h"

#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "preload/capture/proc_info.h"
#include "preload/capture/signal_spec.h"

// Under TSan, signals reach a thread late (at its next intercepted call) with a copy of the
// context from the moment they arrived: that context no longer matches the stack, so the
// handler unwinds from its own frame instead.
#if defined(__SANITIZE_THREAD__)
#define XTIMER_CAPTURE_UNWIND_FROM_HANDLER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XTIMER_CAPTURE_UNWIND_FROM_HANDLER 1
#endif
#endif
#ifndef XTIMER_CAPTURE_UNWIND_FROM_HANDLER
#define XTIMER_CAPTURE_UNWIND_FROM_HANDLER 0
#endif

#define XTIMER_STR2(x) #x
#define XTIMER_STR(x) XTIMER_STR2(x)

namespace xtimer::capture {
namespace {

// The libunwind entry points, by their real (prefixed) names, e.g. _ULx86_64_step.
struct Unwinder {
  int (*getcontext)(unw_context_t*);
  int (*init_local)(unw_cursor_t*, unw_context_t*);
  int (*init_local2)(unw_cursor_t*, unw_context_t*, int);  // libunwind >= 1.3; may be null
  int (*step)(unw_cursor_t*);
  int (*get_reg)(unw_cursor_t*, unw_regnum_t, unw_word_t*);
  int (*is_signal_frame)(unw_cursor_t*);
};

// The slot state is one futex word: generation (30 bits) << 2 | phase. Carrying the generation
// in the word the handler compare-and-swaps makes a late signal for an earlier thread (one the
// dumper gave up on) fail its CAS instead of writing into the capture of the next thread.
enum : uint32_t { kIdle = 0, kArmed = 1, kRunning = 2, kDone = 3 };
constexpr uint32_t Word(uint32_t gen, uint32_t phase) { return (gen << 2) | phase; }

struct Slot {
  std::atomic<uint32_t> word{kIdle};
  std::atomic<pid_t> target{0};
  bool abandoned = false;  // dumper side only
  // Written by the handler between kRunning and kDone.
  uint64_t pthread_id;
  int holds_gil;
  int depth;
  bool truncated;
  uint64_t enter_ns, exit_ns;
  uint64_t ips[NativeCapture::kMaxFrames];
};

// Static storage: a handler that runs late still writes into valid memory. A slot whose handler
// never finished is abandoned (never reused) and the next one is taken.
constexpr int kSlots = 4;
Slot g_slots[kSlots];
std::atomic<Slot*> g_slot{nullptr};
std::atomic<const Unwinder*> g_unwinder{nullptr};
std::atomic<int (*)()> g_gil_check{nullptr};
Unwinder g_unwinder_storage;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (vDSO)
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t* FutexWord(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

void FutexWake(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, FutexWord(a), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* a, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull), static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, FutexWord(a), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

// Walks the stack from `cursor`, innermost first. Async-signal-safe as far as libunwind's local
// unwinder is: no allocation; its global cache lock is taken with all signals blocked, so no
// interrupted thread can be holding it; dl_iterate_phdr's lock is recursive and held only briefly.
void Walk(const Unwinder* u, unw_cursor_t* cursor, bool first_exact, Slot* s) {
  int n = 0;
  bool prev_adjusted = false;  // ips[n - 1] holds ip - 1
  s->truncated = false;
  for (;;) {
    unw_word_t ip = 0;
    if (u->get_reg(cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
    if (n == NativeCapture::kMaxFrames) {
      s->truncated = true;
      break;
    }
    // A return address points after the call; ip - 1 lies inside it, so its line is the call's.
    // Exact are: the interrupted frame, and a frame that a signal interrupted further out (a
    // thread inside a signal handler). libunwind says the latter with unw_is_signal_frame on
    // that very frame: "reached by stepping through a signal frame". The frame before it is
    // then the signal trampoline (__restore_rt), to whose first instruction the handler
    // returns: no call precedes it, so it is exact too (ip - 1 would name the function before
    // it in libc).
    const bool exact = n == 0 ? first_exact : u->is_signal_frame(cursor) > 0;
    if (exact && prev_adjusted) s->ips[n - 1] += 1;
    s->ips[n++] = exact ? ip : ip - 1;
    prev_adjusted = !exact;
    if (u->step(cursor) <= 0) break;
  }
  s->depth = n;
}

void FillSlot(Slot* s, void* ucontext) {
  s->pthread_id = static_cast<uint64_t>(pthread_self());  // reads the thread register; safe
  int (*gil)() = g_gil_check.load(std::memory_order_acquire);
  s->holds_gil = gil != nullptr ? (gil() != 0 ? 1 : 0) : -1;
  s->depth = 0;
  s->truncated = false;
  const Unwinder* u = g_unwinder.load(std::memory_order_acquire);
  if (u == nullptr) return;
  unw_cursor_t cursor;
  if (!XTIMER_CAPTURE_UNWIND_FROM_HANDLER && u->init_local2 != nullptr && ucontext != nullptr &&
      u->init_local2(&cursor, static_cast<unw_context_t*>(ucontext), UNW_INIT_SIGNAL_FRAME) == 0) {
    // Start at the interrupted instruction: the kernel's ucontext_t is libunwind's context type.
    Walk(u, &cursor, true, s);
    return;
  }
  unw_context_t context;
  if (u->getcontext(&context) == 0 && u->init_local(&cursor, &context) == 0) Walk(u, &cursor, false, s);
}

void CaptureHandler(int, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  Slot* s = g_slot.load(std::memory_order_acquire);
  // Only our own queued signal for the capture now in progress: si_code SI_QUEUE from this
  // process, carrying the generation the slot is armed with.
  if (s != nullptr && info != nullptr && info->si_code == SI_QUEUE && info->si_pid == getpid()) {
    const uint32_t gen = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(info->si_value.sival_ptr)) & 0x3fffffff;
    uint32_t expected = Word(gen, kArmed);
    if (s->word.compare_exchange_strong(expected, Word(gen, kRunning), std::memory_order_acq_rel)) {
      if (s->target.load(std::memory_order_relaxed) != gettid()) {
        s->word.store(Word(gen, kArmed), std::memory_order_release);  // not for us: leave it armed
      } else {
        s->enter_ns = NowNs();
        FillSlot(s, ucontext);
        s->exit_ns = NowNs();
        s->word.store(Word(gen, kDone), std::memory_order_release);
        FutexWake(&s->word);
      }
    }
  }
  errno = saved_errno;
}

// Resolves libunwind at Init (dlopen takes the loader lock: never at dump time, when a hung
// thread may hold it).
const Unwinder* LoadUnwinder(std::string* error) {
  void* h = nullptr;
  for (const char* soname : {"libunwind.so.8", "libunwind.so"}) {
    h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) break;
  }
  if (h == nullptr) {
    const char* e = dlerror();
    *error = std::string("libunwind.so.8 not found (install libunwind8): ") + (e ? e : "");
    return nullptr;
  }
  Unwinder& u = g_unwinder_storage;
  u.getcontext = reinterpret_cast<int (*)(unw_context_t*)>(dlsym(h, XTIMER_STR(unw_tdep_getcontext)));
  u.init_local = reinterpret_cast<int (*)(unw_cursor_t*, unw_context_t*)>(dlsym(h, XTIMER_STR(unw_init_local)));
  u.init_local2 = reinterpret_cast<int (*)(unw_cursor_t*, unw_context_t*, int)>(dlsym(h, XTIMER_STR(unw_init_local2)));
  u.step = reinterpret_cast<int (*)(unw_cursor_t*)>(dlsym(h, XTIMER_STR(unw_step)));
  u.get_reg = reinterpret_cast<int (*)(unw_cursor_t*, unw_regnum_t, unw_word_t*)>(dlsym(h, XTIMER_STR(unw_get_reg)));
  u.is_signal_frame = reinterpret_cast<int (*)(unw_cursor_t*)>(dlsym(h, XTIMER_STR(unw_is_signal_frame)));
  if (u.getcontext == nullptr || u.init_local == nullptr || u.step == nullptr || u.get_reg == nullptr ||
      u.is_signal_frame == nullptr) {
    *error = "libunwind lacks the local unwinding functions (" XTIMER_STR(unw_init_local) ", ...)";
    return nullptr;
  }
  // One unwind here, outside any handler, runs libunwind's lazy one-time setup (its tables,
  // its memory-validation pipe) so that the handlers never do.
  unw_context_t context;
  unw_cursor_t cursor;
  if (u.getcontext(&context) == 0 && u.init_local(&cursor, &context) == 0) {
    for (int i = 0; i < 64 && u.step(&cursor) > 0; ++i) {
    }
  }
  return &u;
}

bool OurHandlerIsInstalled(int sig) {
  struct sigaction cur;
  if (sigaction(sig, nullptr, &cur) != 0) return false;
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == CaptureHandler;
}

}  // namespace

bool NativeCapture::Init(int sig, std::string* error) {
  if (sig < SIGRTMIN || sig > SIGRTMAX) {
    *error = SignalName(sig) + " is not a real-time signal (SIGRTMIN..SIGRTMAX)";
    return false;
  }
  struct sigaction old;
  if (sigaction(sig, nullptr, &old) != 0) return (*error = "sigaction failed"), false;
  bool ours = (old.sa_flags & SA_SIGINFO) && old.sa_sigaction == CaptureHandler;
  bool other = !ours && ((old.sa_flags & SA_SIGINFO) || (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN));
  if (other) {
    *error = "the program already handles " + SignalName(sig) + "; set XTIMER_CAPTURE_SIGNAL to a free one";
    return false;
  }
  if (g_unwinder.load() == nullptr) {
    const Unwinder* u = LoadUnwinder(&unwinder_error_);
    g_unwinder.store(u, std::memory_order_release);
  }
  if (g_slot.load() == nullptr) g_slot.store(&g_slots[0], std::memory_order_release);

  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = CaptureHandler;
  // SA_RESTART: a read() on a pipe or an untimed futex wait resumes after the handler instead of
  // failing with EINTR. SA_ONSTACK: run on the thread's alternate stack if it has one (a thread
  // deep in recursion, or a runtime that requires it).
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  // Block other signals while capturing, except synchronous faults (blocking those would turn a
  // fault into an immediate kill instead of the program's own crash handling).
  sigfillset(&sa.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) sigdelset(&sa.sa_mask, s);
  if (sigaction(sig, &sa, nullptr) != 0) return (*error = "cannot install the handler for " + SignalName(sig)), false;
  signal_ = sig;
  return true;
}

bool NativeCapture::unwinder_available() const { return g_unwinder.load() != nullptr; }

void NativeCapture::SetGilCheck(int (*fn)()) { g_gil_check.store(fn, std::memory_order_release); }

bool NativeCapture::HandlerInstalled() const { return signal_ != 0 && OurHandlerIsInstalled(signal_); }

void NativeCapture::ResetAfterFork() {
  for (Slot& s : g_slots) {
    s.word.store(kIdle);
    s.abandoned = false;
  }
  g_slot.store(&g_slots[0]);
}

void NativeCapture::Capture(std::span<const pid_t> tids, int timeout_ms, std::vector<NativeStack>* out,
                            std::span<const char> states) {
  out->clear();
  out->resize(tids.size());
  // Allocate before interrupting anyone, so the loop below does not allocate between threads.
  for (size_t i = 0; i < tids.size(); ++i) {
    (*out)[i].tid = tids[i];
    (*out)[i].ips.reserve(kMaxFrames);
  }
  const pid_t self = gettid();
  bool installed = HandlerInstalled();
  // Slots left to a handler that ran late are usable again once that handler has finished.
  for (Slot& slot : g_slots) {
    if (slot.abandoned && (slot.word.load(std::memory_order_acquire) & 3) == kDone) {
      slot.word.store(kIdle, std::memory_order_release);
      slot.abandoned = false;
      if (g_slot.load() == nullptr) g_slot.store(&slot, std::memory_order_release);
    }
  }
  for (size_t i = 0; i < tids.size(); ++i) {
    NativeStack& ns = (*out)[i];
    if (tids[i] == self) {
      CaptureSelf(&ns);
    } else if (!installed) {
      ns.error = "capture signal handler replaced by the program";
    } else if (g_slot.load() == nullptr) {
      ns.error = "capture disabled: earlier capture handlers did not finish";
    } else {
      const bool in_kernel = i < states.size() && states[i] == 'D';
      CaptureOther(tids[i], in_kernel ? std::min(timeout_ms, 20) : timeout_ms, &ns);
    }
  }
}

void NativeCapture::CaptureSelf(NativeStack* out) {
  Slot scratch;  // a plain local: no signal involved
  FillSlot(&scratch, nullptr);
  out->stop_us = 0;  // the dumper is not stopped by anyone: keep it out of the stop figures
  out->pthread_id = scratch.pthread_id;
  out->holds_gil = scratch.holds_gil;
  out->truncated = scratch.truncated;
  out->ips.assign(scratch.ips, scratch.ips + scratch.depth);
  out->captured = true;
  if (g_unwinder.load() == nullptr) out->error = unwinder_error_;
}

void NativeCapture::CaptureOther(pid_t tid, int timeout_ms, NativeStack* out) {
  Slot* s = g_slot.load(std::memory_order_acquire);
  const uint32_t gen = (++generation_) & 0x3fffffff;
  s->target.store(tid, std::memory_order_relaxed);
  s->word.store(Word(gen, kArmed), std::memory_order_release);

  siginfo_t si;
  std::memset(&si, 0, sizeof si);
  si.si_signo = signal_;
  si.si_code = SI_QUEUE;
  si.si_pid = getpid();
  si.si_uid = getuid();
  si.si_value.sival_ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(gen));
  const uint64_t t0 = NowNs();
  if (syscall(SYS_rt_tgsigqueueinfo, getpid(), tid, signal_, &si) != 0) {
    int err = errno;
    s->word.store(kIdle, std::memory_order_release);
    out->error = err == ESRCH ? "thread exited" : std::string("cannot signal: ") + std::strerror(err);
    return;
  }
  uint64_t deadline = t0 + static_cast<uint64_t>(timeout_ms) * 1000000ull;
  bool extended = false;
  for (;;) {
    uint32_t w = s->word.load(std::memory_order_acquire);
    if (w == Word(gen, kDone)) break;
    uint64_t now = NowNs();
    if (w == Word(gen, kArmed) && now >= deadline && !extended) {
      // A runnable thread that does not block the signal has just not had a CPU yet (a busy
      // machine, many spinning threads): it runs the handler at its next time slice. Wait longer.
      extended = true;
      if (ThreadState(tid) == 'R' && !SignalBlockedIn(tid, signal_)) {
        deadline = t0 + 10ull * static_cast<uint64_t>(timeout_ms) * 1000000ull;
        continue;
      }
    }
    // A handler that has started gets a grace period to finish (it only unwinds: microseconds,
    // unless the thread is preempted in the middle on an overloaded machine).
    const uint64_t hard_deadline = deadline + 2000000000ull;
    if (w == Word(gen, kArmed) && now >= deadline) {
      uint32_t expected = w;
      if (s->word.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
        // The signal stays queued (or is dropped if the thread exits); when it arrives its
        // generation no longer matches and the handler returns at once.
        char st = ThreadState(tid);
        if (st == '?') {
          out->error = "thread exited";
        } else if (SignalBlockedIn(tid, signal_)) {
          out->error = "capture signal blocked by the thread";
        } else if (st == 'D') {
          out->error = "no response: thread in uninterruptible sleep (D)";
        } else {
          out->error = "no response within " + std::to_string(timeout_ms) + " ms (state " + std::string(1, st) + ")";
        }
        return;
      }
      continue;
    }
    if (now >= hard_deadline) {
      // The handler is stuck inside the thread: leave it this slot for good.
      s->abandoned = true;
      Slot* next = nullptr;
      for (Slot& cand : g_slots) {
        if (!cand.abandoned && &cand != s) {
          next = &cand;
          break;
        }
      }
      g_slot.store(next, std::memory_order_release);
      out->error = "capture handler did not finish";
      return;
    }
    if (w == Word(gen, kArmed) && syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH) {
      // Gone (a thread exiting blocks all signals first, then its queued signal is dropped).
      uint32_t expected = w;
      if (s->word.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
        out->error = "thread exited";
        return;
      }
      continue;
    }
    uint64_t until = (w == Word(gen, kArmed)) ? deadline : hard_deadline;
    // Wake every 5 ms to notice a thread that exits without running the handler.
    FutexWait(&s->word, w, std::min<uint64_t>(until - now, 5000000ull));
  }
  out->roundtrip_us = static_cast<double>(NowNs() - t0) / 1000.0;
  out->captured = true;
  out->pthread_id = s->pthread_id;
  out->holds_gil = s->holds_gil;
  out->truncated = s->truncated;
  out->stop_us = static_cast<double>(s->exit_ns - s->enter_ns) / 1000.0;
  out->ips.assign(s->ips, s->ips + s->depth);
  if (g_unwinder.load() == nullptr) out->error = unwinder_error_;
  s->word.store(kIdle, std::memory_order_release);
}

}  // namespace xtimer::capture

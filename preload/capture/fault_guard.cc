#include "preload/capture/fault_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace xtimer::capture {
namespace {

std::atomic<pid_t> g_guard_tid{0};
sigjmp_buf g_jump;
struct sigaction g_prev_segv, g_prev_bus;

void GuardHandler(int sig, siginfo_t*, void*) {
  // SA_NODEFER: the signal is not blocked in here, so the jump (which keeps the mask) leaves it
  // unblocked for the next fault.
  if (g_guard_tid.load(std::memory_order_acquire) == gettid()) siglongjmp(g_jump, sig);
  sigaction(sig, sig == SIGSEGV ? &g_prev_segv : &g_prev_bus, nullptr);
}

}  // namespace

sigjmp_buf* FaultGuard::Jump() { return &g_jump; }

static Mutex& GuardTurn() {
  static Mutex* turn = new Mutex;  // never destroyed: a guard may run during exit
  return *turn;
}

FaultGuard::FaultGuard() : turn_(GuardTurn()) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = GuardHandler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &g_prev_segv) != 0) return;
  if (sigaction(SIGBUS, &sa, &g_prev_bus) != 0) {
    sigaction(SIGSEGV, &g_prev_segv, nullptr);
    return;
  }
  g_guard_tid.store(gettid(), std::memory_order_release);
  installed_ = true;
}

FaultGuard::~FaultGuard() {
  if (!installed_) return;
  g_guard_tid.store(0, std::memory_order_release);
  // Put the previous actions back unless someone replaced ours meanwhile.
  for (int sig : {SIGSEGV, SIGBUS}) {
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == GuardHandler)
      sigaction(sig, sig == SIGSEGV ? &g_prev_segv : &g_prev_bus, nullptr);
  }
}

// Byte by byte through volatile pointers: no call to memcpy, which a sanitizer intercepts and
// would check (and fault in) itself; the amounts read are small.
__attribute__((no_sanitize("address", "thread", "undefined"))) bool FaultGuard::Copy(void* dst, uintptr_t address,
                                                                                     size_t n) {
  if (!installed_ || address == 0) return false;
  if (sigsetjmp(g_jump, 0) != 0) return false;
  const volatile unsigned char* from = reinterpret_cast<const volatile unsigned char*>(address);
  volatile unsigned char* to = static_cast<volatile unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) to[i] = from[i];
  return true;
}

}  // namespace xtimer::capture

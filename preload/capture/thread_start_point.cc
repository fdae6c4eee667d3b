#include "preload/capture/thread_start_point.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace xtimer::capture {
namespace {

struct Range {
  uintptr_t start, end;
};

// The code of libc, the loader and the allocator: a few segments each.
constexpr int kMaxRanges = 16;
Range g_ranges[kMaxRanges];
std::atomic<int> g_count{0};

struct Search {
  uintptr_t targets[3];  // an address inside each object we want
  int count = 0;
};

int AddObjectIfTarget(dl_phdr_info* info, size_t, void* arg) {
  auto* search = static_cast<Search*>(arg);
  bool wanted = false;
  for (int i = 0; i < info->dlpi_phnum && !wanted; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    for (uintptr_t t : search->targets)
      if (t != 0 && t >= start && t < start + ph.p_memsz) wanted = true;
  }
  if (info->dlpi_addr != 0 && info->dlpi_addr == getauxval(AT_BASE)) wanted = true;  // the loader
  if (!wanted) return 0;
  for (int i = 0; i < info->dlpi_phnum && search->count < kMaxRanges; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    g_ranges[search->count++] = Range{start, start + ph.p_memsz};
  }
  return 0;
}

const Range* FindRange(uintptr_t pc, int count) {
  for (int i = 0; i < count; ++i)
    if (pc >= g_ranges[i].start && pc < g_ranges[i].end) return &g_ranges[i];
  return nullptr;
}

#if defined(__x86_64__)
// Blocking calls that SA_RESTART replays and that the C library makes without holding a lock of
// its own (a thread waiting in futex for a lock holds none it could need here).
bool RestartableWithoutLibcLock(long nr) {
  switch (nr) {
    case SYS_read:
    case SYS_write:
    case SYS_readv:
    case SYS_writev:
    case SYS_futex:
    case SYS_wait4:
    case SYS_waitid:
    case SYS_accept:
    case SYS_accept4:
    case SYS_recvfrom:
    case SYS_recvmsg:
    case SYS_sendto:
    case SYS_sendmsg:
    case SYS_connect:
    case SYS_flock: return true;
    default: return false;
  }
}

// The thread was in a system call when the signal came: it returned -EINTR right after the
// `syscall` instruction (0f 05), or the kernel has set it up to execute that instruction again
// (SA_RESTART) with the call's number back in rax.
bool InSystemCall(const ucontext_t* uc, const Range& code) {
  const uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const long rax = static_cast<long>(uc->uc_mcontext.gregs[REG_RAX]);
  const auto* at = reinterpret_cast<const unsigned char*>(pc);
  if (pc >= code.start + 2 && at[-2] == 0x0f && at[-1] == 0x05 && rax == -EINTR) return true;
  if (pc + 2 <= code.end && at[0] == 0x0f && at[1] == 0x05 && RestartableWithoutLibcLock(rax)) return true;
  return false;
}

uintptr_t Pc(const ucontext_t* uc) { return static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]); }
#elif defined(__aarch64__)
bool InSystemCall(const ucontext_t*, const Range&) { return false; }
uintptr_t Pc(const ucontext_t* uc) { return static_cast<uintptr_t>(uc->uc_mcontext.pc); }
#else
bool InSystemCall(const ucontext_t*, const Range&) { return false; }
uintptr_t Pc(const ucontext_t*) { return 0; }
#endif

}  // namespace

void ThreadStartPoint::Init() {
  if (g_count.load(std::memory_order_acquire) > 0) return;
  Search search;
  search.targets[0] = reinterpret_cast<uintptr_t>(&gnu_get_libc_version);          // only libc defines it
  search.targets[1] = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "malloc"));  // whoever allocates
  search.targets[2] = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "calloc"));
  dl_iterate_phdr(AddObjectIfTarget, &search);
  g_count.store(search.count, std::memory_order_release);
}

bool ThreadStartPoint::Safe(const void* ucontext) {
  const int count = g_count.load(std::memory_order_acquire);
  if (ucontext == nullptr || count == 0) return false;
  const auto* uc = static_cast<const ucontext_t*>(ucontext);
  const uintptr_t pc = Pc(uc);
  if (pc == 0) return false;
  const Range* code = FindRange(pc, count);
  return code == nullptr || InSystemCall(uc, *code);
}

}  // namespace xtimer::capture

// ThreadStartPoint: when the dump signal's handler may start the dumper thread, judged from
// the interrupted context. Contexts are built by hand around real code addresses: libc's own
// `syscall` instruction, a libc function, and this program's code.
#include "preload/capture/thread_start_point.h"

#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace xtimer::capture {
namespace {

#if defined(__x86_64__)
__attribute__((noinline)) int ProgramCode(int x) { return x * 3 + 1; }

// The address just after a `syscall` instruction (0f 05) inside libc's syscall(3).
uintptr_t AfterLibcSyscallInstruction() {
  const auto* p = reinterpret_cast<const unsigned char*>(&syscall);
  for (int i = 0; i < 128; ++i)
    if (p[i] == 0x0f && p[i + 1] == 0x05) return reinterpret_cast<uintptr_t>(p + i + 2);
  return 0;
}

ucontext_t Context(uintptr_t pc, long rax) {
  ucontext_t uc{};
  uc.uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(pc);
  uc.uc_mcontext.gregs[REG_RAX] = rax;
  return uc;
}

TEST(ThreadStartPoint, NotBeforeInit) {
  // Nothing is known of libc's code yet: the handler must not guess.
  ucontext_t uc = Context(reinterpret_cast<uintptr_t>(&ProgramCode), 0);
  EXPECT_FALSE(ThreadStartPoint::Safe(&uc));
  EXPECT_FALSE(ThreadStartPoint::Safe(nullptr));
}

TEST(ThreadStartPoint, Decisions) {
  ThreadStartPoint::Init();
  const uintptr_t after = AfterLibcSyscallInstruction();
  ASSERT_NE(after, 0u) << "no syscall instruction found in libc's syscall()";

  ucontext_t uc = Context(reinterpret_cast<uintptr_t>(&ProgramCode), 0);
  EXPECT_TRUE(ThreadStartPoint::Safe(&uc)) << "the program's own code holds no lock of libc's";

  uc = Context(reinterpret_cast<uintptr_t>(&gnu_get_libc_version) + 1, 0);
  EXPECT_FALSE(ThreadStartPoint::Safe(&uc)) << "somewhere in libc, not in a system call";

  uc = Context(after, -EINTR);
  EXPECT_TRUE(ThreadStartPoint::Safe(&uc)) << "a blocking call the signal interrupted (sleep, select...)";

  uc = Context(after, 0);
  EXPECT_FALSE(ThreadStartPoint::Safe(&uc)) << "a call that just returned normally (libc may hold a lock)";

  uc = Context(after - 2, SYS_read);
  EXPECT_TRUE(ThreadStartPoint::Safe(&uc)) << "a read that SA_RESTART will resume";
  uc = Context(after - 2, SYS_futex);
  EXPECT_TRUE(ThreadStartPoint::Safe(&uc)) << "waiting for a lock (holding none)";

  uc = Context(after - 2, SYS_mmap);
  EXPECT_FALSE(ThreadStartPoint::Safe(&uc)) << "mmap is what malloc calls holding its lock";

  void* (*malloc_fn)(size_t) = &malloc;
  uc = Context(reinterpret_cast<uintptr_t>(malloc_fn) + 1, 0);
  EXPECT_FALSE(ThreadStartPoint::Safe(&uc)) << "inside the allocator";
}
#else
TEST(ThreadStartPoint, ProgramCodeOnly) { GTEST_SKIP() << "the system-call rule is x86-64 only"; }
#endif

}  // namespace
}  // namespace xtimer::capture

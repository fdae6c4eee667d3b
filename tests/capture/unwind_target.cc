// The program the unwinding comparison (unwind_gdb_test.cc) looks at: one thread parked in each
// of sem_wait, pthread_cond_wait, read, select, sleep, epoll_wait, at the bottom of a recursion,
// and inside a signal handler, each a few frames of our own deep (one of them through an inlined
// function). Built four ways (frame pointers on/off x -O0/-O2, tests/capture/CMakeLists.txt).
//
// usage: unwind_target DIR
// Starts the stack dumper (stack files into DIR, symbolised by xtimer_symbolize as in the
// product), parks the threads, prints "ready <pid>" on stdout and waits in pause() forever: the
// test sends the dump signal (SIGUSR2), then attaches gdb, then kills it. Every thread loops
// around its blocking call, so the interruption by the capture signal (EINTR from select, sleep,
// epoll_wait) puts it back where it was before gdb looks.
//
// The functions are extern "C" and noinline so that both gdb and xtimer name them alike;
// after each call a compiler barrier keeps the call from becoming a tail call at -O2, so the
// caller stays on the stack (what gdb shows is the reference either way).
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "preload/capture/dumper.h"

#define XT_NOINLINE __attribute__((noinline))
#define XT_BARRIER() asm volatile("" ::: "memory")

namespace {

sem_t g_sem;
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
int g_pipe[2];          // never written: readers block for good
int g_select_pipe[2];   // never written
int g_handler_pipe[2];  // never written: the signal handler blocks on it
int g_epoll = -1;
volatile bool g_never = false;  // never set: the loops below do not end
sem_t g_parked;                 // posted by each thread just before it blocks

}  // namespace

extern "C" {

// ---- sem_wait, two levels deep (the case gdb showed and we missed). At -O2 the leaf's call is a tail call
// (jmp sem_wait): the leaf leaves no frame, and only DWARF call-site information shows it.
XT_NOINLINE void xt_sem_leaf() { sem_wait(&g_sem); }
XT_NOINLINE void xt_sem_mid() {
  sem_post(&g_parked);
  while (!g_never) {
    xt_sem_leaf();
    XT_BARRIER();
  }
}

// ---- pthread_cond_wait.
XT_NOINLINE void xt_cond_leaf() {
  pthread_mutex_lock(&g_mu);
  sem_post(&g_parked);
  for (;;) pthread_cond_wait(&g_cv, &g_mu);
}

// ---- read on a pipe nobody writes, reached through a function inlined at -O2.
XT_NOINLINE void xt_read_leaf() {
  char c;
  for (;;) {
    if (read(g_pipe[0], &c, 1) == 1) break;
    XT_BARRIER();
  }
}
static inline __attribute__((always_inline)) void xt_read_inlined() {
  sem_post(&g_parked);
  xt_read_leaf();
  XT_BARRIER();
}
XT_NOINLINE void xt_read_mid() {
  xt_read_inlined();
  XT_BARRIER();
}

// ---- select with no timeout.
XT_NOINLINE void xt_select_leaf() {
  sem_post(&g_parked);
  for (;;) {
    fd_set in;
    FD_ZERO(&in);
    FD_SET(g_select_pipe[0], &in);
    select(g_select_pipe[0] + 1, &in, nullptr, nullptr, nullptr);
    XT_BARRIER();
  }
}

// ---- sleep (nanosleep -> clock_nanosleep in glibc).
XT_NOINLINE void xt_sleep_leaf() {
  sem_post(&g_parked);
  for (;;) {
    sleep(1000);
    XT_BARRIER();
  }
}

// ---- epoll_wait with no timeout.
XT_NOINLINE void xt_epoll_leaf() {
  sem_post(&g_parked);
  for (;;) {
    epoll_event ev;
    epoll_wait(g_epoll, &ev, 1, -1);
    XT_BARRIER();
  }
}

// ---- recursion: 6 levels, then a semaphore.
XT_NOINLINE int xt_recurse(int depth) {
  if (depth == 0) {
    sem_post(&g_parked);
    while (!g_never) {
      sem_wait(&g_sem);
      XT_BARRIER();
    }
    return 0;
  }
  int r = xt_recurse(depth - 1);
  XT_BARRIER();
  return r + 1;
}

// ---- inside a signal handler: SIGUSR1 sent to itself, the handler blocks in read().
XT_NOINLINE void xt_handler_body() {
  char c;
  sem_post(&g_parked);
  for (;;) {
    if (read(g_handler_pipe[0], &c, 1) == 1) break;
    XT_BARRIER();
  }
}
XT_NOINLINE void xt_signal_handler(int) {
  xt_handler_body();
  XT_BARRIER();
}
XT_NOINLINE void xt_raise_leaf() {
  pthread_kill(pthread_self(), SIGUSR1);
  XT_BARRIER();
}

void* xt_sem_thread(void*) { return xt_sem_mid(), nullptr; }
void* xt_cond_thread(void*) { return xt_cond_leaf(), nullptr; }
void* xt_read_thread(void*) { return xt_read_mid(), nullptr; }
void* xt_select_thread(void*) { return xt_select_leaf(), nullptr; }
void* xt_sleep_thread(void*) { return xt_sleep_leaf(), nullptr; }
void* xt_epoll_thread(void*) { return xt_epoll_leaf(), nullptr; }
void* xt_recurse_thread(void*) { return xt_recurse(6), nullptr; }
void* xt_signal_thread(void*) { return xt_raise_leaf(), nullptr; }

}  // extern "C"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: unwind_target DIR\n");
    return 2;
  }
  // Under Yama ptrace_scope 1 only an ancestor may attach; gdb is the test's child, not ours.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  xtimer::capture::DumperOptions opt;
  opt.timeline_path = argv[1];
  if (!xtimer::capture::Dumper::Instance().Start(nullptr, opt)) {
    std::fprintf(stderr, "unwind_target: the dumper did not start\n");
    return 1;
  }
  sem_init(&g_sem, 0, 0);
  sem_init(&g_parked, 0, 0);
  g_epoll = epoll_create1(EPOLL_CLOEXEC);
  if (pipe(g_pipe) != 0 || pipe(g_select_pipe) != 0 || pipe(g_handler_pipe) != 0 || g_epoll < 0) {
    std::perror("unwind_target");
    return 1;
  }
  struct sigaction sa = {};
  sa.sa_handler = xt_signal_handler;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);

  struct Named {
    const char* name;
    void* (*fn)(void*);
  };
  const Named threads[] = {{"t-sem", xt_sem_thread},         {"t-cond", xt_cond_thread},
                           {"t-read", xt_read_thread},       {"t-select", xt_select_thread},
                           {"t-sleep", xt_sleep_thread},     {"t-epoll", xt_epoll_thread},
                           {"t-recurse", xt_recurse_thread}, {"t-signal", xt_signal_thread}};
  for (const Named& t : threads) {
    pthread_t th;
    if (pthread_create(&th, nullptr, t.fn, nullptr) != 0) return 1;
    pthread_setname_np(th, t.name);
  }
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; ++i) sem_wait(&g_parked);
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  for (;;) pause();
}

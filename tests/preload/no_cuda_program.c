/* A program that never calls CUDA, for the dump signal at load.
 *
 *   no_cuda_program wait         prints "ready PID", waits in wait_for_input() until stdin ends
 *   no_cuda_program own-handler  the same, with its own SIGUSR2 handler; prints "handled N"
 *   no_cuda_program busy FILE    prints "ready PID", computes in busy_loop() until FILE exists
 * Exits 0.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t handled = 0;

static void own_handler(int sig) {
  (void)sig;
  handled++;
}

/* Blocks in read(2): the dump signal's handler has SA_RESTART, so the read is resumed. */
__attribute__((noinline)) static long wait_for_input(void) {
  char buf[256];
  long total = 0;
  for (;;) {
    ssize_t n = read(0, buf, sizeof buf);
    if (n > 0) {
      total += n;
    } else if (n == 0) {
      return total;
    }
  }
}

/* Runs in the program's own code, outside the C library, most of the time. */
__attribute__((noinline)) static unsigned long busy_loop(const char* stop_file) {
  volatile unsigned long x = 0;
  for (;;) {
    for (unsigned long i = 0; i < 20000000ul; ++i) x += i * i;
    if (access(stop_file, F_OK) == 0) return x;
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "wait";
  if (strcmp(mode, "own-handler") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = own_handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  if (strcmp(mode, "busy") == 0 && argc > 2) {
    busy_loop(argv[2]);
  } else {
    wait_for_input();
  }
  if (strcmp(mode, "own-handler") == 0) printf("handled %d\n", (int)handled);
  return 0;
}

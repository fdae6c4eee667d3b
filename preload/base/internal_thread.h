// Threads the library runs (poller, watchdog): named, so they are recognisable in stack dumps,
// and deaf to the application's asynchronous signals (Ctrl-C, a launcher's SIGTERM, SIGCHLD),
// which must reach the application's own threads. Faults and real-time signals (the stack
// capture's) stay deliverable.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace xtimer {

template <typename Fn>
std::thread StartInternalThread(const char* name, Fn&& body) {
  return std::thread([name, body = std::forward<Fn>(body)]() mutable {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE, SIGALRM, SIGWINCH, SIGTSTP})
      sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    pthread_setname_np(pthread_self(), name);
    body();
  });
}

}  // namespace xtimer

// Runs one function per rank in forked processes (the parent never touches CUDA, so the
// children start clean) and collects their exit codes.
#pragma once
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#define MP_CHECK(cond)                                                                            \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "[pid %d] %s:%d: check failed: %s\n", getpid(), __FILE__, __LINE__, #cond); \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

#define MP_EQ(a, b)                                                                                            \
  do {                                                                                                         \
    auto a_ = (a);                                                                                             \
    auto b_ = (b);                                                                                             \
    if (!(a_ == b_)) {                                                                                         \
      fprintf(stderr, "[pid %d] %s:%d: %s == %s failed: %lld vs %lld\n", getpid(), __FILE__, __LINE__, #a, #b, \
              (long long)a_, (long long)b_);                                                                   \
      return 1;                                                                                                \
    }                                                                                                          \
  } while (0)

namespace simtest {

// Exit codes per rank; -1 for a rank killed after `timeout_s`.
inline std::vector<int> run_ranks(int n, const std::function<int(int)>& body, int timeout_s = 120) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = body(r);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(size_t(n), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[size_t(r)] == 0) continue;
      int status = 0;
      if (waitpid(pids[size_t(r)], &status, WNOHANG) == pids[size_t(r)]) {
        codes[size_t(r)] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[size_t(r)] = 0;
        --left;
      }
    }
    if (left && std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids)
        if (p) kill(p, SIGKILL);
      for (pid_t p : pids)
        if (p) waitpid(p, nullptr, 0);
      break;
    }
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

// Memory shared by the parent and all ranks (allocate before run_ranks).
template <typename T>
T* shared_object() {
  void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) T();
}

}  // namespace simtest

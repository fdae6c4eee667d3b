#include "ckpt/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace xtimer::ckpt {
namespace {

// Field 3 (state) and field 22 (start time in clock ticks) of /proc/<pid>/stat.
bool ReadStat(pid_t pid, char* state, uint64_t* start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parens
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  *state = *p;
  // After ')' come fields 3, 4, ...: skip 19 fields to reach field 22.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  *start = std::strtoull(p, nullptr, 10);
  return true;
}

uint64_t Pack(pid_t pid, uint64_t start) {
  return (static_cast<uint64_t>(start & 0xffffffu) << 32) | static_cast<uint32_t>(pid);
}

}  // namespace

uint64_t TagOf(pid_t pid) {
  if (pid <= 0) return 0;
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(pid, &state, &start)) return 0;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;
  return Pack(pid, start);
}

uint64_t SelfTag() {
  static std::atomic<uint64_t> cached{0};
  uint64_t t = cached.load(std::memory_order_relaxed);
  if (t == 0 || TagPid(t) != getpid()) {
    t = TagOf(getpid());
    if (t == 0) t = Pack(getpid(), 0);
    cached.store(t, std::memory_order_relaxed);
  }
  return t;
}

bool TagAlive(uint64_t tag) {
  tag = TagOnly(tag);
  if (tag == 0) return false;
  pid_t pid = TagPid(tag);
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  return TagOf(pid) == tag;
}

}  // namespace xtimer::ckpt

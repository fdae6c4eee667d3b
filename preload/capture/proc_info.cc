#include "preload/capture/proc_info.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace xtimer::capture {
namespace {

// Reads a small /proc file whole; "" on failure.
std::string ReadSmallFile(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) break;
  }
  close(fd);
  return out;
}

std::string TaskPath(pid_t tid, const char* leaf) {
  char path[64];
  if (tid == 0) {
    std::snprintf(path, sizeof path, "/proc/self/%s", leaf);
  } else {
    std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", static_cast<int>(tid), leaf);
  }
  return path;
}

std::string ExecutablePath() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "[main]";
  buf[n] = '\0';
  return buf;
}

// The GNU build-id from the object's PT_NOTE segments, read in memory. Only notes inside a
// PT_LOAD segment of the same object are read, so the memory is mapped.
std::string BuildId(const dl_phdr_info* info) {
  auto mapped = [info](uint64_t vaddr, uint64_t size) {
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& ph = info->dlpi_phdr[i];
      if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr + size <= ph.p_vaddr + ph.p_filesz) return true;
    }
    return false;
  };
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE || !mapped(ph.p_vaddr, ph.p_filesz)) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char* end = p + ph.p_filesz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) nh;
      std::memcpy(&nh, p, sizeof nh);
      const unsigned char* name = p + sizeof nh;
      const unsigned char* desc = name + ((nh.n_namesz + 3) & ~3u);
      const unsigned char* next = desc + ((nh.n_descsz + 3) & ~3u);
      if (next > end || next <= p) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        std::string hex;
        static const char kDigits[] = "0123456789abcdef";
        for (uint32_t k = 0; k < nh.n_descsz; ++k) {
          hex += kDigits[desc[k] >> 4];
          hex += kDigits[desc[k] & 15];
        }
        return hex;
      }
      p = next;
    }
  }
  return {};
}

}  // namespace

std::vector<pid_t> ListThreads() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long tid = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && tid > 0) tids.push_back(static_cast<pid_t>(tid));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

std::string ThreadName(pid_t tid) {
  std::string s = ReadSmallFile(TaskPath(tid, "comm").c_str());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

char ThreadState(pid_t tid) {
  std::string s = ReadSmallFile(TaskPath(tid, "stat").c_str());
  // "pid (comm) S ...": comm may hold spaces and parentheses, so look after the last ')'.
  size_t close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return '?';
  return s[close + 2];
}

bool SignalBlockedIn(pid_t tid, int sig) {
  std::string s = ReadSmallFile(TaskPath(tid, "status").c_str());
  size_t pos = s.find("\nSigBlk:");
  if (pos == std::string::npos) return false;
  unsigned long long mask = std::strtoull(s.c_str() + pos + 8, nullptr, 16);
  return sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1;
}

void ModuleMap::Build() {
  segments_.clear();
  modules_.clear();
  struct Ctx {
    ModuleMap* self;
    bool first;
  } ctx{this, true};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* c = static_cast<Ctx*>(data);
        ModuleMap* m = c->self;
        ModuleInfo mod;
        const char* name = info->dlpi_name;
        if (name == nullptr || name[0] == '\0') {
          // The first object is the program itself; an unnamed later one is the vDSO on some systems.
          mod.path = c->first ? ExecutablePath() : "[vdso]";
        } else if (std::strncmp(name, "linux-vdso", 10) == 0 || std::strncmp(name, "linux-gate", 10) == 0) {
          mod.path = "[vdso]";
        } else {
          char real[PATH_MAX];
          mod.path = realpath(name, real) != nullptr ? real : name;
        }
        c->first = false;
        mod.build_id = BuildId(info);
        int index = static_cast<int>(m->modules_.size());
        bool any = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
          uint64_t start = info->dlpi_addr + ph.p_vaddr;
          m->segments_.push_back({start, start + ph.p_memsz, info->dlpi_addr, index});
          any = true;
        }
        if (any) m->modules_.push_back(std::move(mod));
        return 0;
      },
      &ctx);
  std::sort(segments_.begin(), segments_.end(), [](const Segment& a, const Segment& b) { return a.start < b.start; });
}

bool ModuleMap::Find(uint64_t address, int* module, uint64_t* vaddr) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), address,
                             [](uint64_t a, const Segment& s) { return a < s.start; });
  if (it == segments_.begin()) return false;
  --it;
  if (address >= it->end) return false;
  *module = it->module;
  *vaddr = address - it->bias;
  return true;
}

}  // namespace xtimer::capture

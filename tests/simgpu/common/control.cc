#include "common/control.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/simgpu_clock.h"
#include "common/simgpu_env.h"

namespace simgpu {
namespace {

constexpr int64_t kRecheckNs = 50'000'000;

struct Control {
  std::string path;
  int rank = -1, node = -1;
  std::atomic<double> gpu_factor{1.0};
  std::atomic<double> net_gbps{-1.0};
  std::atomic<bool> nccl_blackhole{false};
  // The stuck-kernel rule: replaced (never freed, so a reader never sees it go) when it changes.
  struct Stuck {
    StuckKernel rule;
    std::atomic<int64_t> seen{0};
  };
  std::atomic<Stuck*> stuck{nullptr};
  std::atomic<int64_t> next_check{0};
  std::mutex mu;  // one re-reader at a time
  // Identity of the text last parsed (guarded by mu).
  int64_t mtime_ns = -1, size = -1;
  ino_t ino = 0;
};

Control& control() {
  static Control* c = [] {
    auto* s = new Control;  // never destroyed: stream workers may ask while the process exits
    if (const char* p = getenv("SIMGPU_CONTROL")) s->path = p;
    s->rank = int(env_int("RANK", -1));
    s->node = int(env_int("SIMGPU_NODE", -1));
    return s;
  }();
  return *c;
}

bool matches(const char* word, size_t len, int rank, int node) {
  auto is = [&](const char* key, int value) {
    size_t k = strlen(key);
    if (len <= k || strncmp(word, key, k) != 0) return false;
    char* end = nullptr;
    long v = strtol(word + k, &end, 10);
    return end == word + len && v == value;
  };
  if (len == 3 && strncmp(word, "all", 3) == 0) return true;
  return is("rank=", rank) || is("node=", node);
}

void reread(Control& c) {
  struct stat st;
  if (stat(c.path.c_str(), &st) != 0) {
    if (c.size != -1) {
      c.gpu_factor.store(1.0);
      c.net_gbps.store(-1.0);
      c.nccl_blackhole.store(false);
      c.stuck.store(nullptr);
    }
    c.mtime_ns = c.size = -1;
    return;
  }
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime == c.mtime_ns && int64_t(st.st_size) == c.size && st.st_ino == c.ino) return;
  FILE* f = fopen(c.path.c_str(), "r");
  if (f == nullptr) return;
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1 << 20);) text.append(buf, n);
  fclose(f);
  StuckKernel stuck;
  Faults now = parse_faults(text.c_str(), c.rank, c.node, &stuck);
  c.gpu_factor.store(now.gpu_factor);
  c.net_gbps.store(now.net_gbps);
  c.nccl_blackhole.store(now.nccl_blackhole);
  const Control::Stuck* old = c.stuck.load();
  if (stuck.pattern.empty()) {
    c.stuck.store(nullptr);
  } else if (!old || old->rule.pattern != stuck.pattern || old->rule.launch != stuck.launch) {
    auto* fresh = new Control::Stuck;  // leaked on purpose: stream workers may hold the old one
    fresh->rule = stuck;
    c.stuck.store(fresh);
  }
  c.mtime_ns = mtime;
  c.size = int64_t(st.st_size);
  c.ino = st.st_ino;
  log("control: gpu_factor %.3g net_gbps %.3g nccl_blackhole %d stuck_kernel '%s' #%lld", now.gpu_factor, now.net_gbps,
      int(now.nccl_blackhole), stuck.pattern.c_str(), static_cast<long long>(stuck.launch));
}

}  // namespace

Faults parse_faults(const char* text, int rank, int node, StuckKernel* stuck) {
  Faults f;
  if (stuck) *stuck = StuckKernel{};
  const char* p = text;
  while (*p) {
    const char* eol = strchr(p, '\n');
    if (eol == nullptr) eol = p + strlen(p);
    std::string line(p, size_t(eol - p));
    p = *eol ? eol + 1 : eol;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    // Words: selectors (no settings of ours) and key=value settings.
    bool selected = true, any_selector = false;
    Faults set{-1.0, -1.0, false};
    int blackhole = -1;
    std::string stuck_pattern;
    int64_t stuck_launch = -1;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j == i) break;
      const char* w = line.c_str() + i;
      const size_t len = j - i;
      double* target = nullptr;
      size_t key = 0;
      if (len > 11 && strncmp(w, "gpu_factor=", 11) == 0) target = &set.gpu_factor, key = 11;
      if (len > 9 && strncmp(w, "net_gbps=", 9) == 0) target = &set.net_gbps, key = 9;
      auto value = [&](size_t key_len) { return std::string(w + key_len, len - key_len); };
      if (len > 13 && strncmp(w, "stuck_kernel=", 13) == 0) {
        stuck_pattern = value(13);
      } else if (len > 13 && strncmp(w, "stuck_launch=", 13) == 0) {
        char* end = nullptr;
        const std::string v = value(13);
        long long n = strtoll(v.c_str(), &end, 10);
        if (*end == '\0' && n >= 1) stuck_launch = n;
      } else if (len > 15 && strncmp(w, "nccl_blackhole=", 15) == 0) {
        const std::string v = value(15);
        if (v == "0" || v == "1") blackhole = v == "1";
      } else if (target != nullptr) {
        std::string v(w + key, len - key);
        char* end = nullptr;
        double d = strtod(v.c_str(), &end);
        if (end != v.c_str() && *end == '\0' && d >= 0) *target = d;
      } else if ((len == 3 && strncmp(w, "all", 3) == 0) || strncmp(w, "rank=", 5) == 0 ||
                 strncmp(w, "node=", 5) == 0) {
        any_selector = true;
        selected = selected && matches(w, len, rank, node);
      }
      i = j;
    }
    if (!any_selector || !selected) continue;
    if (set.gpu_factor > 0) f.gpu_factor = set.gpu_factor;
    if (set.net_gbps >= 0) f.net_gbps = set.net_gbps;
    if (blackhole >= 0) f.nccl_blackhole = blackhole == 1;
    if (stuck) {
      if (!stuck_pattern.empty()) stuck->pattern = stuck_pattern;
      if (stuck_launch > 0) stuck->launch = stuck_launch;
    }
  }
  return f;
}

Faults current_faults() {
  Control& c = control();
  if (c.path.empty()) return Faults{};
  const int64_t now = now_ns();
  if (now >= c.next_check.load(std::memory_order_relaxed)) {
    std::unique_lock<std::mutex> lock(c.mu, std::try_to_lock);
    if (lock.owns_lock()) {
      c.next_check.store(now + kRecheckNs, std::memory_order_relaxed);
      reread(c);
    }
  }
  return Faults{c.gpu_factor.load(std::memory_order_relaxed), c.net_gbps.load(std::memory_order_relaxed),
                c.nccl_blackhole.load(std::memory_order_relaxed)};
}

bool stuck_kernel_launch(const std::string& name) {
  Control& c = control();
  if (c.path.empty()) return false;
  current_faults();  // re-reads the file when due
  Control::Stuck* s = c.stuck.load(std::memory_order_acquire);
  if (s == nullptr || name.find(s->rule.pattern) == std::string::npos) return false;
  return s->seen.fetch_add(1, std::memory_order_relaxed) + 1 == s->rule.launch;
}

}  // namespace simgpu

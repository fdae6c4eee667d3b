#include "preload/timing/call_sites.h"

#include <atomic>
#include <cstring>

namespace xtimer::sites {
namespace {

struct Site {
  std::atomic<bool> ready{false};
  char text[kMaxText] = {};
};

Site g_sites[kMaxSites];              // id i lives in g_sites[i - 1]
std::atomic<uint32_t> g_used{0};      // slots claimed
std::atomic<uint32_t> g_backward{0};  // the process' backward site
thread_local uint32_t t_site = 0;     // this thread's site

}  // namespace

uint32_t Register(const char* text) {
  if (text == nullptr || text[0] == '\0') return 0;
  const uint32_t slot = g_used.fetch_add(1, std::memory_order_relaxed);
  if (slot >= kMaxSites) return 0;
  Site& s = g_sites[slot];
  std::strncpy(s.text, text, kMaxText - 1);
  s.ready.store(true, std::memory_order_release);
  return slot + 1;
}

const char* Text(uint32_t id) {
  if (id == 0 || id > kMaxSites) return nullptr;
  const Site& s = g_sites[id - 1];
  return s.ready.load(std::memory_order_acquire) ? s.text : nullptr;
}

uint32_t SwapThreadSite(uint32_t id) {
  const uint32_t old = t_site;
  t_site = id;
  return old;
}

uint32_t SwapBackwardSite(uint32_t id) { return g_backward.exchange(id, std::memory_order_relaxed); }

uint32_t Current() { return t_site != 0 ? t_site : g_backward.load(std::memory_order_relaxed); }

}  // namespace xtimer::sites

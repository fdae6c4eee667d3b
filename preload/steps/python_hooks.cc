#include "preload/steps/python_hooks.h"

#include <atomic>

#include "common/env.h"
#include "preload/base/mpmc_queue.h"
#include "preload/timing/call_sites.h"

#define XTIMER_EXPORT extern "C" __attribute__((visibility("default")))

namespace xtimer::python {
namespace {

constexpr size_t kQueue = 8192;  // spans between two polls (5 ms apart) is a handful

std::atomic<MpmcQueue<Span>*> g_queue{nullptr};
std::atomic<bool> g_on{false};
std::atomic<uint64_t> g_main_thread{0};
std::atomic<uint64_t> g_dropped{0};

}  // namespace

void Enable(bool on) {
  if (on && g_queue.load(std::memory_order_acquire) == nullptr)
    g_queue.store(new MpmcQueue<Span>(kQueue), std::memory_order_release);  // kept for the process' life
  g_on.store(on, std::memory_order_release);
}

bool Pop(Span* out) {
  MpmcQueue<Span>* q = g_queue.load(std::memory_order_acquire);
  return q != nullptr && q->Pop(out);
}

uint64_t MainThread() { return g_main_thread.load(std::memory_order_relaxed); }
uint64_t Dropped() { return g_dropped.load(std::memory_order_relaxed); }

}  // namespace xtimer::python

XTIMER_EXPORT int xtimer_python_hello(int abi, unsigned long main_thread) {
  using namespace xtimer;
  if (abi != python::kAbi) return 0;
  if (env::Bool("XTIMER_DISABLE") || !env::Bool("XTIMER_PYTHON_HOOKS")) return 0;
  python::g_main_thread.store(main_thread, std::memory_order_relaxed);
  return (env::Bool("XTIMER_STEPS") ? python::kWantSpans : 0) | (env::Bool("XTIMER_DESYNC") ? python::kWantSites : 0);
}

XTIMER_EXPORT void xtimer_python_span(int kind, uint64_t begin_ns, uint64_t end_ns) {
  using namespace xtimer::python;
  using xtimer::MpmcQueue;
  if (!g_on.load(std::memory_order_acquire) || end_ns < begin_ns || (kind != 1 && kind != 2)) return;
  MpmcQueue<Span>* q = g_queue.load(std::memory_order_acquire);
  if (q == nullptr || !q->Push(Span{static_cast<uint8_t>(kind), begin_ns, end_ns}))
    g_dropped.fetch_add(1, std::memory_order_relaxed);
}

XTIMER_EXPORT unsigned xtimer_python_site_id(const char* text) { return xtimer::sites::Register(text); }

XTIMER_EXPORT unsigned xtimer_python_site(int which, unsigned id) {
  return which == 1 ? xtimer::sites::SwapBackwardSite(id) : xtimer::sites::SwapThreadSite(id);
}

#include "driver/named_kernel.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "common/control.h"
#include "common/simgpu_clock.h"
#include "common/simgpu_env.h"
#include "driver/driver.h"

namespace simgpu::drv {
namespace {

struct Registry {
  std::shared_mutex mu;
  std::unordered_map<std::string, NamedKernel*> by_name;
  std::unordered_set<const void*> handles;
};
Registry& registry() {
  static auto* r = new Registry;  // never destroyed: workers may launch while the process exits
  return *r;
}

std::string demangled(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

struct Model {
  double floor_ns;
  double ns_per_thread;
};
const Model& model() {
  static const Model m = [] {
    double tflops = env_double("SIMGPU_TFLOPS", 100.0);
    if (tflops <= 0) tflops = 100.0;
    double floor_us = env_double("SIMGPU_KERNEL_FLOOR_US", 3.0);
    double flops = env_double("SIMGPU_KERNEL_FLOPS_PER_THREAD", 64.0);
    return Model{std::max(0.0, floor_us) * 1e3, std::max(0.0, flops) / (tflops * 1e3)};
  }();
  return m;
}

// The demangled names the stuck rule matches, one per kernel (filled on first use).
struct Pretty {
  std::shared_mutex mu;
  std::unordered_map<const NamedKernel*, std::string> names;
};
const std::string& pretty_name(const NamedKernel& k) {
  static auto* p = new Pretty;
  {
    std::shared_lock lk(p->mu);
    auto it = p->names.find(&k);
    if (it != p->names.end()) return it->second;
  }
  std::string d = demangled(k.name);
  std::unique_lock lk(p->mu);
  return p->names.emplace(&k, std::move(d)).first->second;  // node-based: stays valid
}

}  // namespace

const NamedKernel* as_named_kernel(const void* f) {
  Registry& r = registry();
  std::shared_lock lk(r.mu);
  return r.handles.count(f) ? static_cast<const NamedKernel*>(f) : nullptr;
}

// Exported so that a stack dump of a rank whose kernel never completes names the wait.
extern "C" __attribute__((visibility("default"), noinline)) void simgpu_stuck_kernel(const char* name) {
  log("kernel %s is stuck (SIMGPU_CONTROL stuck_kernel): it never completes", name);
  for (;;) sleep_until_ns(now_ns() + 100'000'000);
}

int64_t run_named_kernel(const NamedKernel& k, uint64_t threads, int64_t start) {
  if (stuck_kernel_launch(pretty_name(k))) simgpu_stuck_kernel(k.name.c_str());
  const Model& m = model();
  const double ns = std::max(m.floor_ns, double(threads) * m.ns_per_thread) * current_faults().gpu_factor;
  const int64_t end = start + int64_t(ns);
  device_sleep_until_ns(end);
  return end;
}

}  // namespace simgpu::drv

SIMGPU_EXPORT void* simgpu_named_kernel(const char* name) {
  using namespace simgpu::drv;
  if (name == nullptr) return nullptr;
  Registry& r = registry();
  {
    std::shared_lock lk(r.mu);
    auto it = r.by_name.find(name);
    if (it != r.by_name.end()) return it->second;
  }
  std::unique_lock lk(r.mu);
  auto [it, fresh] = r.by_name.emplace(name, nullptr);
  if (fresh) {
    it->second = new NamedKernel{kNamedKernelMagic, name};
    r.handles.insert(it->second);
  }
  return it->second;
}

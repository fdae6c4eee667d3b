// Finding the real function behind a hook, resolved once and cached (heaptrack's typed hook
// table idea). First dlsym(RTLD_NEXT); if that fails because the library was dlopen'ed with
// RTLD_LOCAL (how Python loads torch's CUDA libraries), the already-loaded library is found by
// soname with RTLD_NOLOAD. Nothing is ever loaded that the program did not load itself.
#pragma once

#include <atomic>

// A hook: defined under the C name of the function it interposes, and one of the few symbols the
// library exports (everything else is hidden; preload/exports.map).
#define XTIMER_EXPORT extern "C" __attribute__((visibility("default")))

namespace xtimer {

// Which library a hooked symbol normally lives in; the sonames tried for RTLD_NOLOAD.
enum class Lib { kCudart, kCuda, kCublas, kCublasLt, kNccl };

// The real address of `name`, or nullptr when the library is not loaded (then the hook can
// only have been reached through a bogus call, and reports an error code).
void* ResolveReal(const char* name, Lib lib);

// Logs (once per name) that a hook was reached but its real function cannot be found.
void ReportMissingReal(const char* name);

template <typename Fn>
class RealFunction {
 public:
  constexpr RealFunction(const char* name, Lib lib) : name_(name), lib_(lib) {}
  Fn get() {
    Fn f = fn_.load(std::memory_order_acquire);
    if (f == nullptr) {
      f = reinterpret_cast<Fn>(ResolveReal(name_, lib_));
      if (f != nullptr) fn_.store(f, std::memory_order_release);
    }
    return f;
  }
  // The same, but a missing function is reported (once per name) before null is returned.
  Fn get_or_report() {
    Fn f = get();
    if (f == nullptr) ReportMissingReal(name_);
    return f;
  }
  // Remember a real address learned elsewhere (dlsym or cuGetProcAddress interception).
  void set(void* f) { fn_.store(reinterpret_cast<Fn>(f), std::memory_order_release); }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Lib lib_;
  std::atomic<Fn> fn_{nullptr};
};

// Declares `real_<name>` for a function declared in a CUDA/NCCL header.
#define XTIMER_REAL(lib, fn) static ::xtimer::RealFunction<decltype(&::fn)> real_##fn(#fn, ::xtimer::Lib::lib)

}  // namespace xtimer

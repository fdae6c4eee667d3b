#include "preload/base/real_function.h"

#include <dlfcn.h>

#include <atomic>
#include <iterator>

#include "common/cuda_libraries.h"
#include "common/log.h"

namespace xtimer {
namespace {

const char* const* SonamesOf(Lib lib) {
  // The supported sonames, then the development name: a program that dlopen'ed "libcudart.so"
  // has it loaded under that name, and RTLD_NOLOAD matches names only.
  static_assert(std::size(kCudartSonames) == 2);
  static const char* const kCudart[] = {kCudartSonames[0], kCudartSonames[1], "libcudart.so", nullptr};
  static const char* const kCuda[] = {"libcuda.so.1", "libcuda.so", nullptr};
  static const char* const kCublas[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", nullptr};
  static const char* const kCublasLt[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", nullptr};
  static const char* const kNccl[] = {"libnccl.so.2", "libnccl.so", nullptr};
  switch (lib) {
    case Lib::kCudart: return kCudart;
    case Lib::kCuda: return kCuda;
    case Lib::kCublas: return kCublas;
    case Lib::kCublasLt: return kCublasLt;
    case Lib::kNccl: return kNccl;
  }
  return kCuda;
}

}  // namespace

void* ResolveReal(const char* name, Lib lib) {
  // RTLD_NEXT here means "after libxtimer_preload.so" because the call is made from our code.
  if (void* f = dlsym(RTLD_NEXT, name)) return f;
  for (const char* const* s = SonamesOf(lib); *s != nullptr; ++s) {
    void* h = dlopen(*s, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    void* f = dlsym(h, name);
    dlclose(h);  // drops only the reference RTLD_NOLOAD added
    if (f != nullptr) return f;
  }
  Log(LogLevel::kDebug, "real %s not found (library not loaded)", name);
  return nullptr;
}

void ReportMissingReal(const char* name) {
  // Rare and off the fast path; a small fixed table keeps it to one line per name.
  static std::atomic<const char*> seen[64];
  for (auto& s : seen) {
    const char* cur = s.load(std::memory_order_relaxed);
    if (cur == name) return;
    if (cur == nullptr && s.compare_exchange_strong(cur, name)) break;
  }
  Log(LogLevel::kError, "%s was called but the library that defines it is not loaded; returning an error", name);
}

}  // namespace xtimer

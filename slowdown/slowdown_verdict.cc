#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

const char* CauseName(Cause c) {
  switch (c) {
    case Cause::kGpuCompute: return "gpu_compute";
    case Cause::kNetwork: return "network";
    case Cause::kHost: return "host";
    case Cause::kPythonGc: return "python_gc";
    case Cause::kDataLoading: return "data_loading";
  }
  return "host";
}

const char* ScopeName(Scope s) {
  switch (s) {
    case Scope::kRank: return "rank";
    case Scope::kNode: return "node";
    case Scope::kLink: return "link";
    case Scope::kJob: return "job";
  }
  return "job";
}

}  // namespace xtimer::slowdown

#include "viewer/frame_kind.h"

#include <array>

namespace xtimer {
namespace {

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool Contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

bool IsTorchModule(std::string_view base) {
  static constexpr std::array<std::string_view, 14> kPrefixes = {
      "libtorch", "libc10",        "libnccl",  "libcuda",  "libcudart",   "libcublas",    "libcudnn",
      "libnvrtc", "libnvToolsExt", "libcupti", "libcufft", "libcusparse", "libnvJitLink", "_C.cpython"};
  for (std::string_view p : kPrefixes)
    if (StartsWith(base, p)) return true;
  return false;
}

bool IsSystemModule(std::string_view base) {
  static constexpr std::array<std::string_view, 11> kPrefixes = {"libc.so",   "libc-",      "ld-linux", "libpthread",
                                                                 "libstdc++", "libgcc_s",   "libm.so",  "libdl",
                                                                 "librt",     "linux-vdso", "[vdso]"};
  for (std::string_view p : kPrefixes)
    if (StartsWith(base, p)) return true;
  return base == "[kernel]" || base == "[kernel.kallsyms]";
}

}  // namespace

FrameKind ClassifyPythonFrame(std::string_view function, std::string_view file) {
  if (Contains(file, "/torch/") || StartsWith(file, "torch/")) return FrameKind::kTorch;
  return FrameKind::kPython;
}

FrameKind ClassifyNativeFrame(std::string_view function, std::string_view module) {
  std::string_view base = Basename(module);
  if (StartsWith(base, "libpython") || StartsWith(base, "python")) return FrameKind::kCPython;
  if (IsTorchModule(base)) return FrameKind::kTorch;
  if (IsSystemModule(base)) return FrameKind::kSystem;
  // Without a module (or a static binary), go by the name.
  if (StartsWith(function, "_Py") || StartsWith(function, "Py") || StartsWith(function, "_PyEval"))
    return FrameKind::kCPython;
  if (StartsWith(function, "nccl") || StartsWith(function, "cuda") ||
      (StartsWith(function, "cu") && function.size() > 2 && function[2] >= 'A' && function[2] <= 'Z') ||
      StartsWith(function, "c10::") || StartsWith(function, "at::") || StartsWith(function, "torch::") ||
      StartsWith(function, "c10d::"))
    return FrameKind::kTorch;
  if (StartsWith(function, "__") || StartsWith(function, "pthread_") || StartsWith(function, "std::") ||
      function == "clone" || function == "clone3" || function == "start_thread" || function == "_start")
    return FrameKind::kSystem;
  return FrameKind::kCpp;
}

const char* FrameKindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kPython: return "python";
    case FrameKind::kCPython: return "cpython";
    case FrameKind::kTorch: return "torch";
    case FrameKind::kCpp: return "cpp";
    case FrameKind::kSystem: return "system";
    case FrameKind::kState: return "state";
  }
  return "cpp";
}

const char* FrameKindColor(FrameKind kind) {
  switch (kind) {
    case FrameKind::kPython: return "#4f9de8";   // blue
    case FrameKind::kCPython: return "#9b8fd9";  // violet
    case FrameKind::kTorch: return "#e8663c";    // orange-red
    case FrameKind::kCpp: return "#e8b03c";      // amber
    case FrameKind::kSystem: return "#9aa5ad";   // grey
    case FrameKind::kState: return "#5fbf6a";    // green
  }
  return "#e8b03c";
}

}  // namespace xtimer

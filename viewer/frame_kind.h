// What kind of code a frame belongs to, for the colours of the flame graph and the call tree:
// the reader should see at a glance whether a rank waits in Python code, the interpreter,
// torch/NCCL/CUDA, other C++, the C library or kernel, or a thread state we added.
#pragma once

#include <cstdint>
#include <string_view>

namespace xtimer {

enum class FrameKind : uint8_t {
  kPython,   // a Python frame (user code, stdlib, site-packages other than torch)
  kCPython,  // the interpreter itself (libpython, _PyEval_*, Py*)
  kTorch,    // torch / c10 / NCCL / CUDA / cuBLAS / cuDNN, native or Python
  kCpp,      // any other native code
  kSystem,   // libc, libstdc++, the dynamic loader, the kernel
  kState,    // a frame the viewer adds: thread state, GIL holder
};

inline constexpr int kFrameKindCount = 6;

FrameKind ClassifyPythonFrame(std::string_view function, std::string_view file);
FrameKind ClassifyNativeFrame(std::string_view function, std::string_view module);

const char* FrameKindName(FrameKind kind);  // "python", "cpython", "torch", "cpp", "system", "state"
// Base colour (#rrggbb) of the kind; the flame graph varies it a little per frame.
const char* FrameKindColor(FrameKind kind);

}  // namespace xtimer

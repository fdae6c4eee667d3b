// The CUDA runtime's sonames this version works with, newest first (CUDA 13, then 12): the one
// list every component that finds libcudart tries (the preload's hooks, the checkpoint's copies,
// netprobe's GPU tests). Header-only: safe inside the preloaded library.
#pragma once

namespace xtimer {

inline constexpr const char* kCudartSonames[] = {"libcudart.so.13", "libcudart.so.12"};
// For messages: "libcudart.so.13 or .so.12".
inline constexpr const char* kCudartSonamesText = "libcudart.so.13 or .so.12";

}  // namespace xtimer

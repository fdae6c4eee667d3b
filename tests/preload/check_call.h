// CHECK(call): the workloads' way to stop at the first CUDA/cuBLAS/NCCL/CUPTI call that fails,
// naming the call, its place and its status (every one of those APIs returns 0 for success).
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    int status_ = static_cast<int>(call);                                                 \
    if (status_ != 0) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, status_); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

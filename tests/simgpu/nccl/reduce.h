// Element-wise reductions of the simulated NCCL, for every ncclDataType_t but the fp8 ones.
#pragma once
#include <cstddef>

#include <nccl.h>

namespace simgpu::nccl {

size_t type_size(ncclDataType_t t);
bool reducible(ncclDataType_t t);

// out[i] = srcs[0][i] op srcs[1][i] op ... in source order (so every rank gets the same
// bits). Source `scaled` is first multiplied by *scale when scale is set (PreMulSum);
// `avg_divisor` > 0 divides the result (ncclAvg). `out` may alias a source.
void reduce(void* out, const void* const* srcs, int nsrc, size_t count, ncclDataType_t t, ncclRedOp_t op,
            int avg_divisor, int scaled = -1, const void* scale = nullptr);

// dst[i] = src[i] * (*scale), in type t.
void scale_copy(void* dst, const void* src, size_t count, ncclDataType_t t, const void* scale);

}  // namespace simgpu::nccl

#include "nccl/reduce.h"

#include <cstdint>
#include <cstring>

namespace simgpu::nccl {
namespace {

// IEEE binary16 <-> float.
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const uint32_t shift = uint32_t(14 - exp);
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = (uint32_t(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // round to nearest even (may carry into exp)
  return uint16_t(sign | h);
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // NaN stays NaN
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

template <typename T>
T apply(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return T(a * b);
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return T(a + b);  // sum, avg, premulsum
  }
}

// T: storage type, A: arithmetic type; load/store convert between them.
template <typename T, typename A, A (*load)(T), T (*store)(A)>
void reduce_t(void* out, const void* const* srcs, int nsrc, size_t count, ncclRedOp_t op, int avg_divisor, int scaled,
              const void* scale_ptr) {
  const A scale = scale_ptr ? load(*static_cast<const T*>(scale_ptr)) : A(1);
  for (size_t i = 0; i < count; ++i) {
    A acc = load(static_cast<const T*>(srcs[0])[i]);
    if (scaled == 0) acc = A(acc * scale);
    for (int s = 1; s < nsrc; ++s) {
      A v = load(static_cast<const T*>(srcs[s])[i]);
      if (s == scaled) v = A(v * scale);
      acc = apply(acc, v, op);
    }
    if (avg_divisor > 0) acc = A(acc / A(avg_divisor));
    static_cast<T*>(out)[i] = store(acc);
  }
}

template <typename T>
T ident(T v) {
  return v;
}

float h2f(uint16_t v) { return half_to_float(v); }
uint16_t f2h(float v) { return float_to_half(v); }
float b2f(uint16_t v) { return bf16_to_float(v); }
uint16_t f2b(float v) { return float_to_bf16(v); }

}  // namespace

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

bool reducible(ncclDataType_t t) { return type_size(t) != 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2; }

void reduce(void* out, const void* const* srcs, int nsrc, size_t count, ncclDataType_t t, ncclRedOp_t op,
            int avg_divisor, int scaled, const void* scale) {
  if (!scale) scaled = -1;
#define R(T, A, L, S) reduce_t<T, A, L, S>(out, srcs, nsrc, count, op, avg_divisor, scaled, scale)
  switch (t) {
    case ncclInt8: R(int8_t, int8_t, ident<int8_t>, ident<int8_t>); break;
    case ncclUint8: R(uint8_t, uint8_t, ident<uint8_t>, ident<uint8_t>); break;
    case ncclInt32: R(int32_t, int32_t, ident<int32_t>, ident<int32_t>); break;
    case ncclUint32: R(uint32_t, uint32_t, ident<uint32_t>, ident<uint32_t>); break;
    case ncclInt64: R(int64_t, int64_t, ident<int64_t>, ident<int64_t>); break;
    case ncclUint64: R(uint64_t, uint64_t, ident<uint64_t>, ident<uint64_t>); break;
    case ncclFloat32: R(float, float, ident<float>, ident<float>); break;
    case ncclFloat64: R(double, double, ident<double>, ident<double>); break;
    case ncclFloat16: R(uint16_t, float, h2f, f2h); break;
    case ncclBfloat16: R(uint16_t, float, b2f, f2b); break;
    default: break;
  }
#undef R
}

void scale_copy(void* dst, const void* src, size_t count, ncclDataType_t t, const void* scale) {
  const void* srcs[1] = {src};
  reduce(dst, srcs, 1, count, t, ncclSum, 0, 0, scale);
}

}  // namespace simgpu::nccl

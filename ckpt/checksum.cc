#include "ckpt/checksum.h"

#include <emmintrin.h>

#include <cstdio>
#include <cstring>

namespace xtimer::ckpt {
namespace {

constexpr size_t kBlock = 64;  // bytes per loop iteration: 4 vectors = 8 lanes of 64 bits

// Lane j of the vector loop sees words j, j+8, j+16, ...; with m blocks,
//   a_j = sum_g w_{8g+j},   s_j = sum_g (m - g) w_{8g+j}   (after a_j += w; s_j += a_j)
// and the Fletcher-form b' of the whole run is 8 * sum(s_j) - sum(j * a_j).
Fletcher Fold(const __m128i a[4], const __m128i s[4], uint64_t blocks) {
  uint64_t av[8], sv[8];
  for (int k = 0; k < 4; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(av + 2 * k), a[k]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(sv + 2 * k), s[k]);
  }
  Fletcher f;
  uint64_t ssum = 0, jsum = 0;
  for (uint64_t j = 0; j < 8; ++j) {
    f.a_ += av[j];
    ssum += sv[j];
    jsum += j * av[j];
  }
  f.b_ = 8 * ssum - jsum;
  f.n_ = 8 * blocks;
  return f;
}

// The tail (< 64 bytes): whole words, then one zero-padded partial word.
Fletcher Tail(const unsigned char* p, size_t len) {
  Fletcher f;
  while (len > 0) {
    uint64_t w = 0;
    size_t k = len < 8 ? len : 8;
    std::memcpy(&w, p, k);  // little-endian hosts only (x86-64, aarch64)
    f.a_ += w;
    f.b_ += f.a_;
    ++f.n_;
    p += k;
    len -= k;
  }
  return f;
}

template <bool kCopy, bool kStream>
Fletcher Kernel(void* dst, const void* src, size_t len) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const size_t blocks = len / kBlock;
  __m128i a[4], acc[4];
  for (int k = 0; k < 4; ++k) a[k] = acc[k] = _mm_setzero_si128();
  for (size_t i = 0; i < blocks; ++i) {
    const auto* sv = reinterpret_cast<const __m128i*>(s + i * kBlock);
    __m128i w0 = _mm_loadu_si128(sv), w1 = _mm_loadu_si128(sv + 1);
    __m128i w2 = _mm_loadu_si128(sv + 2), w3 = _mm_loadu_si128(sv + 3);
    if constexpr (kCopy) {
      auto* dv = reinterpret_cast<__m128i*>(d + i * kBlock);
      if constexpr (kStream) {
        _mm_stream_si128(dv, w0), _mm_stream_si128(dv + 1, w1);
        _mm_stream_si128(dv + 2, w2), _mm_stream_si128(dv + 3, w3);
      } else {
        _mm_storeu_si128(dv, w0), _mm_storeu_si128(dv + 1, w1);
        _mm_storeu_si128(dv + 2, w2), _mm_storeu_si128(dv + 3, w3);
      }
    }
    a[0] = _mm_add_epi64(a[0], w0), a[1] = _mm_add_epi64(a[1], w1);
    a[2] = _mm_add_epi64(a[2], w2), a[3] = _mm_add_epi64(a[3], w3);
    acc[0] = _mm_add_epi64(acc[0], a[0]), acc[1] = _mm_add_epi64(acc[1], a[1]);
    acc[2] = _mm_add_epi64(acc[2], a[2]), acc[3] = _mm_add_epi64(acc[3], a[3]);
  }
  if constexpr (kCopy && kStream) _mm_sfence();
  Fletcher f = Fold(a, acc, blocks);
  size_t done = blocks * kBlock;
  if (done < len) {
    if constexpr (kCopy) std::memcpy(d + done, s + done, len - done);
    f.Append(Tail(s + done, len - done));
  }
  return f;
}

}  // namespace

std::string Checksum::ToHex() const {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx:%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

bool Checksum::FromHex(const std::string& s, Checksum* out) {
  if (s.size() != 33 || s[16] != ':') return false;
  auto parse = [](const char* p, uint64_t* v) {
    *v = 0;
    for (int i = 0; i < 16; ++i) {
      char c = p[i];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      *v = (*v << 4) | static_cast<uint64_t>(d);
    }
    return true;
  };
  return parse(s.data(), &out->a) && parse(s.data() + 17, &out->b);
}

Fletcher ChecksumBytes(const void* p, size_t len) { return Kernel<false, false>(nullptr, p, len); }

Fletcher CopyWithChecksum(void* dst, const void* src, size_t len, bool stream) {
  // Non-temporal stores need 16-byte aligned destinations.
  if (stream && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) return Kernel<true, true>(dst, src, len);
  return Kernel<true, false>(dst, src, len);
}

}  // namespace xtimer::ckpt

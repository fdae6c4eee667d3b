#include "common/desync/fingerprint.h"

#include <cstdio>

namespace xtimer::desync {

bool Fingerprint::SameCall(const Fingerprint& o) const {
  if (op != o.op || count != o.count || dtype != o.dtype || redop != o.redop || root != o.root) return false;
  return site.empty() || o.site.empty() || site == o.site;
}

std::string DtypeName(int32_t dtype) {
  static const char* kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                 "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  if (dtype >= 0 && dtype < int32_t(sizeof kNames / sizeof kNames[0])) return kNames[dtype];
  return "dtype " + std::to_string(dtype);
}

uint32_t DtypeSize(int32_t dtype) {
  static const uint32_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  if (dtype >= 0 && dtype < int32_t(sizeof kSizes / sizeof kSizes[0])) return kSizes[dtype];
  return 0;
}

namespace {

std::string Bytes(uint64_t b) {
  char buf[48];
  if (b >= (1ull << 30) && b % (1ull << 20) == 0) std::snprintf(buf, sizeof buf, "%.3g GiB", double(b) / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.3g MiB", double(b) / (1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.3g KiB", double(b) / (1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace

std::string Describe(const Fingerprint& f) {
  std::string s = f.op + " #" + std::to_string(f.seq);
  if (uint32_t size = DtypeSize(f.dtype); size > 0) s += " of " + Bytes(f.count * size);
  s += " (" + std::to_string(f.count) + " x " + DtypeName(f.dtype);
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  s += ")";
  if (!f.site.empty()) s += " at " + f.site;
  return s;
}

}  // namespace xtimer::desync

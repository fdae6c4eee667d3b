#include "preload/timing/op_names.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "preload/base/real_function.h"

namespace xtimer {
namespace {

XTIMER_REAL(kCudart, cudaFuncGetName);
RealFunction<CUresult (*)(const char**, CUfunction)> real_cuFuncGetName("cuFuncGetName", Lib::kCuda);
RealFunction<CUresult (*)(const char**, CUkernel)> real_cuKernelGetName("cuKernelGetName", Lib::kCuda);

std::string Demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

std::string KernelName(const OpKey& key) {
  const char* raw = nullptr;
  if (key.a == 2) {  // a CUPTI record's kernel: func is the poller's copy of its name
    raw = static_cast<const std::string*>(key.func)->c_str();
  } else if (key.a == 1) {
    if (auto f = real_cuFuncGetName.get()) f(&raw, static_cast<CUfunction>(const_cast<void*>(key.func)));
  } else if (key.a == 3) {
    if (auto f = real_cuKernelGetName.get()) f(&raw, static_cast<CUkernel>(const_cast<void*>(key.func)));
  } else if (auto f = real_cudaFuncGetName.get()) {
    if (f(&raw, key.func) != cudaSuccess) raw = nullptr;
  }
  if (raw == nullptr) {
    Dl_info info;
    if (dladdr(key.func, &info) != 0 && info.dli_sname != nullptr) raw = info.dli_sname;
  }
  if (raw != nullptr) return Demangle(raw);
  char buf[48];
  std::snprintf(buf, sizeof buf, "kernel@%p", key.func);
  return buf;
}

}  // namespace

const std::string& NameOf(OpClass& cls) {
  if (!cls.name.empty()) return cls.name;
  const OpKey& k = cls.key;
  if (k.kind == OpKind::kKernel && k.api == nullptr) {
    cls.name = KernelName(k);
  } else if (k.kind == OpKind::kMemcpy && k.a >= 0) {  // a < 0: a memset, named by its api
    cls.name = std::string(k.api) + " " + MemcpyKindName(static_cast<int>(k.a));
  } else {
    cls.name = k.api != nullptr ? k.api : "?";
  }
  return cls.name;
}

std::string KernelNameOf(const void* func, int how) {
  OpKey key;
  key.func = func;
  key.a = how;
  return KernelName(key);
}

std::string DemangledName(const char* raw) { return Demangle(raw); }

const char* NcclTypeName(int type) {
  static const char* kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                 "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return (type >= 0 && type < 12) ? kNames[type] : "unknown";
}

int NcclTypeSize(int type) {
  static const int kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (type >= 0 && type < 12) ? kSizes[type] : 1;
}

double BusBandwidthFactor(const char* api, int n) {
  if (n <= 1) return 1.0;
  double ring = static_cast<double>(n - 1) / n;
  if (std::strcmp(api, "ncclAllReduce") == 0) return 2 * ring;
  if (std::strcmp(api, "ncclAllGather") == 0 || std::strcmp(api, "ncclReduceScatter") == 0 ||
      std::strcmp(api, "ncclAlltoAll") == 0 || std::strcmp(api, "ncclGather") == 0 ||
      std::strcmp(api, "ncclScatter") == 0)
    return ring;
  return 1.0;  // broadcast, reduce, send/recv
}

const char* MemcpyKindName(int kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "HtoH";
    case cudaMemcpyHostToDevice: return "HtoD";
    case cudaMemcpyDeviceToHost: return "DtoH";
    case cudaMemcpyDeviceToDevice: return "DtoD";
    default: return "default";
  }
}

}  // namespace xtimer

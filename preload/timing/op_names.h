// Human names of op classes, resolved off the launch path (poller or dumper thread).
#pragma once

#include <string>

#include "preload/timing/op_class.h"

namespace xtimer {

// Fills cls.name on first use (kernel symbol, demangled) and returns it.
const std::string& NameOf(OpClass& cls);
// NCCL data type names and sizes (ncclDataType_t values).
const char* NcclTypeName(int type);
int NcclTypeSize(int type);
// nccl-tests bus bandwidth factor for a collective API name and communicator size.
double BusBandwidthFactor(const char* api, int nranks);
const char* MemcpyKindName(int kind);
// The display name of a launched kernel: `how` 0 = a runtime host stub, 1 = a CUfunction,
// 3 = a CUkernel (cudaKernel_t).
std::string KernelNameOf(const void* func, int how);
// A kernel's display name: `raw` demangled when it is a C++ symbol.
std::string DemangledName(const char* raw);

}  // namespace xtimer

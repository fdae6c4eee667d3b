// What one collective call was, as every rank of its communicator must agree: the fingerprint
// the preloaded library records per call and the node agent (or the collector) compares. Pure
// data and text, no clock, no I/O. Wire form: docs/formats.md, "Agent channel" (fingerprints).
#pragma once

#include <cstdint>
#include <string>

namespace xtimer::desync {

struct Fingerprint {
  std::string comm;  // the communicator's id, the same on every rank (8 hex digits)
  int32_t comm_size = 0;
  uint64_t seq = 0;    // the call's number among the communicator's collectives, from 1
  std::string op;      // "AllReduce", "AllGather", ... (without "nccl")
  uint64_t count = 0;  // elements, as passed to NCCL (all-gather: per rank)
  int32_t dtype = -1;  // ncclDataType_t
  int32_t redop = -1;  // ncclRedOp_t; -1 where the operation has none
  int32_t root = -1;   // root rank; -1 where the operation has none
  std::string site;    // the Python call site, "func (file:line)"; "" when unknown

  // Equal in everything a peer must match (an unknown site matches any).
  bool SameCall(const Fingerprint& o) const;
};

// "float32" for ncclFloat32 (and so on); "dtype N" for an unknown one.
std::string DtypeName(int32_t dtype);
// Bytes per element of an NCCL data type; 0 if unknown.
uint32_t DtypeSize(int32_t dtype);
// "AllReduce #5 of 4 MiB" (+ " float16" when the size alone does not tell calls apart is up to
// the caller), "at clip_grads (train.py:88)" when the site is known.
std::string Describe(const Fingerprint& f);

}  // namespace xtimer::desync

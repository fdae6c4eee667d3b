// The CUDA path of a save: device memory -> pinned staging buffers (asynchronous copies on a
// stream of the tensor's device) -> the shared-memory slot (the copy threads, computing the
// checksums), with the next chunks' device-to-host copies in flight while the threads copy.
//
// libcudart is opened with dlopen() at the first CUDA tensor (libcudart.so.13, else .so.12);
// xtimer never links CUDA. The caller makes sure the tensors' producers finished (the Python
// side synchronises the device's current stream first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/copier.h"
#include "ckpt/status.h"

namespace xtimer::ckpt {

struct StagingConfig {
  uint64_t chunk_bytes = 32ull << 20;  // size of each pinned buffer
  int buffers = 4;                     // how many are in flight
};

// What the pipeline did (for tests): chunks copied, and the most device-to-host copies that were
// in flight while the threads copied a staged chunk into shared memory.
struct CudaCopyStats {
  uint64_t chunks = 0;
  int max_in_flight = 0;
};

// Copies the CUDA sources named by `which` to base + offsets[i] and sets (*sums)[i].
Status CopyCudaSources(const std::vector<Source>& sources, const std::vector<size_t>& which, unsigned char* base,
                       const std::vector<uint64_t>& offsets, std::vector<Checksum>* sums, int threads,
                       const StagingConfig& config = {}, CudaCopyStats* stats = nullptr);

// Whether a CUDA runtime can be loaded here (and which file), without using it.
bool CudaRuntimeAvailable(std::string* detail);

}  // namespace xtimer::ckpt

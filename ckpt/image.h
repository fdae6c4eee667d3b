// The image of one rank's checkpoint: the bytes of a shared-memory slot and, unchanged, of a
// `.xtc` file on disk (docs/formats.md, "Flash checkpoint").
//
//   [0, 80)                 header: magic, version, step, where the index is, its checksum,
//                           and a checksum of the header itself
//   [4096, index_off)       tensor data, each entry at a 64-byte aligned offset
//   [index_off, +index_len) the index: one JSON object (entries with name, dtype, shape,
//                           device, offset, nbytes, checksum; and the state dict's structure)
//
// The index sits after the data because it holds the data's checksums: a writer copies the
// data (computing checksums), then writes the index, then the header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/status.h"

namespace xtimer::ckpt {

constexpr char kImageMagic[8] = {'X', 'T', 'I', 'M', 'E', 'R', 'C', 'K'};
constexpr uint32_t kImageVersion = 1;
constexpr uint64_t kHeaderLen = 80;
constexpr uint64_t kDataOffset = 4096;
constexpr uint64_t kEntryAlign = 64;

struct ImageHeader {  // little-endian, as stored
  char magic[8];
  uint32_t version;
  uint32_t header_len;
  int64_t step;
  uint64_t data_off;
  uint64_t index_off;
  uint64_t index_len;
  uint64_t index_sum_a;
  uint64_t index_sum_b;
  uint64_t head_sum_a;  // checksum of bytes [0, 64)
  uint64_t head_sum_b;
};
static_assert(sizeof(ImageHeader) == kHeaderLen);

// Element size of a dtype name ("float32", "bfloat16", ...); 0 if unknown.
int DtypeSize(const std::string& dtype);

struct Entry {
  std::string name;    // path in the state dict, keys joined by '/'
  std::string dtype;   // torch/numpy name: float32, bfloat16, int64, bool, ...
  std::string device;  // where the tensor lived: "cpu", "cuda:0", "numpy"
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the start of the image
  uint64_t nbytes = 0;
  Checksum sum;
};

struct ImageInfo {
  int64_t step = -1;
  int rank = 0;
  int world_size = 1;
  std::string tree_json;  // structure of the state dict (JSON, written by the Python side)
};

// Offsets for entries of the given sizes; returns where the index starts.
uint64_t PlanData(const std::vector<uint64_t>& nbytes, std::vector<uint64_t>* offsets);

// The index JSON for `entries` (checksums included).
std::string BuildIndex(const ImageInfo& info, const std::vector<Entry>& entries);

// Writes the header for an index already stored at index_off.
void WriteHeader(void* image, int64_t step, uint64_t index_off, const std::string& index);

// A parsed, checked index. `index_json` is the raw JSON (for the Python side).
struct Index {
  ImageInfo info;
  std::vector<Entry> entries;
  std::string index_json;
  uint64_t image_len = 0;
};

// Checks the header and the index of an image held in memory (size = bytes available) and
// parses it. Data checksums are not checked here (see VerifyData). `what` names the image in
// messages (a file path or a shared-memory slot).
Status ParseImage(const void* image, uint64_t size, const std::string& what, Index* out);
// Header only: where the index is. For files, read the header, then the index.
Status ParseHeader(const void* header, uint64_t file_size, const std::string& what, ImageHeader* out);
// Parses an index read separately (the bytes at header.index_off).
Status ParseIndex(const ImageHeader& h, const std::string& index, const std::string& what, Index* out);

// Verifies every entry's data checksum; names the first bad entry.
Status VerifyData(const void* image, const Index& index, const std::string& what);

}  // namespace xtimer::ckpt

// Fuzz target: any bytes as a checkpoint image (a .xtc file or a shared-memory slot) through the
// readers the loader and `xtimer_ckpt inspect` use: ParseImage (header, index JSON, every
// entry's bounds), then VerifyData over what it accepted, and the file path (header first, then
// the index read where the header says) with the place check (CheckPlace); each input twice, as
// it is and with its checksums made right (below). Nothing may crash,
// read out of bounds or accept an entry outside the image. Built with libFuzzer when the
// compiler is clang and XTIMER_FUZZ is on; tests/viewer/corpus_replay_main.cc replays the kept
// corpus (tests/ckpt/fuzz_corpus) through this file as an ordinary test under any compiler.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/image.h"
#include "ckpt/persist.h"

using namespace xtimer::ckpt;

namespace {

void ReadImage(const uint8_t* data, size_t size);

// The header and index checksums stop almost every mutation before the index parser; a second
// pass makes them right (index = the bytes from index_off to the end), so the fuzzer explores the
// index JSON and the entries' bounds too.
void ReadWithChecksumsFixed(const uint8_t* data, size_t size) {
  if (size < kHeaderLen) return;
  std::vector<uint8_t> img(data, data + size);
  ImageHeader h;
  std::memcpy(&h, img.data(), sizeof h);
  if (h.index_off < kHeaderLen || h.index_off >= size) return;
  h.index_len = size - h.index_off;
  Checksum is = ChecksumOf(img.data() + h.index_off, h.index_len);
  h.index_sum_a = is.a;
  h.index_sum_b = is.b;
  std::memcpy(img.data(), &h, sizeof h);
  Checksum hs = ChecksumOf(img.data(), 64);
  h.head_sum_a = hs.a;
  h.head_sum_b = hs.b;
  std::memcpy(img.data(), &h, sizeof h);
  ReadImage(img.data(), img.size());
}

void ReadImage(const uint8_t* data, size_t size) {
  Index idx;
  if (ParseImage(data, size, "fuzz", &idx).ok()) {
    // Everything accepted lies inside the image: VerifyData reads it all.
    for (const Entry& e : idx.entries)
      if (e.offset + e.nbytes > size || e.offset < kDataOffset) std::abort();
    (void)VerifyData(data, idx, "fuzz");
    (void)CheckPlace("/ckpt/3/rank_0.xtc", idx.info);
    (void)CheckPlace("rank_1.xtc", idx.info);
  }
  // As XtcFile::Open reads a file: the header against the file size, then the index from where
  // the header says (only if it lies inside the bytes we have).
  ImageHeader h;
  if (size >= kHeaderLen && ParseHeader(data, size, "fuzz", &h).ok()) {
    if (h.index_off + h.index_len != size) std::abort();  // ParseHeader promised this
    std::string index(reinterpret_cast<const char*>(data) + h.index_off, h.index_len);
    Index other;
    (void)ParseIndex(h, index, "fuzz", &other);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ReadImage(data, size);
  ReadWithChecksumsFixed(data, size);
  return 0;
}

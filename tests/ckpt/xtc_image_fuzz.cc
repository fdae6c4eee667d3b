// Fuzz target: any bytes as a checkpoint image (a .xtc file or a shared-memory slot) through the
// readers the loader and `xtimer_ckpt inspect` use: ParseImage (header, index JSON, every
// entry's bounds), then VerifyData over what it accepted, and the file path (header first, then
// the index read where the header says) with the place check (CheckPlace). Nothing may crash,
// read out of bounds or accept an entry outside the image. Built with libFuzzer when the
// compiler is clang and XTIMER_FUZZ is on; tests/viewer/corpus_replay_main.cc replays the kept
// corpus (tests/ckpt/fuzz_corpus) through this file as an ordinary test under any compiler.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ckpt/image.h"
#include "ckpt/persist.h"

using namespace xtimer::ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
  return 0;
}

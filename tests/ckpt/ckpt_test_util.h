// Helpers for the checkpoint tests: temporary folders (the shared-memory one on a tmpfs), and a
// deterministic state whose bytes depend on its step.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/image.h"
#include "ckpt/persist.h"
#include "ckpt/segment.h"

namespace xtimer::ckpt::testing {

// Writes DIR/<step>/rank_<rank>.xtc holding one uint8 tensor "w" with `data`, as rank `rank` of
// `world` would; "" when written, else why not.
inline std::string WriteOneTensorRankFile(const std::string& ckpt_dir, int64_t step, int rank, int world,
                                          const std::vector<uint8_t>& data) {
  const uint64_t n = data.size();
  std::vector<uint64_t> offsets;
  uint64_t index_off = PlanData({n}, &offsets);
  Entry e{"w", "uint8", "cpu", {static_cast<int64_t>(n)}, offsets[0], n, ChecksumOf(data.data(), n)};
  std::string index = BuildIndex({step, rank, world, "null"}, {e});
  std::vector<uint8_t> img(index_off + index.size());
  std::memcpy(img.data() + offsets[0], data.data(), n);
  std::memcpy(img.data() + index_off, index.data(), index.size());
  WriteHeader(img.data(), step, index_off, index);
  Index idx;
  Status st = ParseImage(img.data(), img.size(), "img", &idx);
  if (st.ok()) st = WriteImageFile(img.data(), idx, RankFile(ckpt_dir, step, rank));
  return st.ok() ? "" : st.message();
}

class TempDirs {
 public:
  explicit TempDirs(const std::string& tag) {
    char shm[] = "/dev/shm/xtimer-ckpt-test-XXXXXX";
    char disk[] = "/tmp/xtimer-ckpt-test-XXXXXX";
    shm_ = mkdtemp(shm);
    disk_ = mkdtemp(disk);
    ckpt_ = disk_ + "/" + tag;
  }
  ~TempDirs() {
    std::error_code ec;
    std::filesystem::remove_all(shm_, ec);
    std::filesystem::remove_all(disk_, ec);
  }
  const std::string& shm() const { return shm_; }
  const std::string& ckpt() const { return ckpt_; }

 private:
  std::string shm_, disk_, ckpt_;
};

// Tensors of a few shapes filled from a generator seeded with the step.
struct FakeState {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<SaveEntry> entries;

  FakeState(int64_t step, const std::vector<uint64_t>& sizes) {
    std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919 + 1);
    bufs.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      bufs[i].resize(sizes[i]);
      for (auto& b : bufs[i]) b = static_cast<uint8_t>(rng());
      SaveEntry e;
      e.name = "t" + std::to_string(i);
      e.dtype = "uint8";
      e.device = "cpu";
      e.shape = {static_cast<int64_t>(sizes[i])};
      e.src.ptr = bufs[i].data();
      e.src.nbytes = sizes[i];
      e.src.elem_size = 1;
      e.src.shape = e.shape;
      entries.push_back(e);
    }
  }
  SaveArgs Args(int64_t step, bool disk = false) const {
    SaveArgs a;
    a.step = step;
    a.world_size = 1;
    a.tree_json = "{\"step\":" + std::to_string(step) + "}";
    a.entries = entries;
    a.disk = disk;
    return a;
  }
};

}  // namespace xtimer::ckpt::testing

namespace xtimer::ckpt::testing {

// Cheap deterministic bytes: word i of tensor t at step s.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline void Fill(std::vector<uint64_t>& buf, int64_t step, size_t tensor) {
  uint64_t seed = Mix(static_cast<uint64_t>(step) * 1000003 + tensor);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = Mix(seed + i);
}

// A state of `words` 64-bit words per tensor whose content is a function of the step.
struct StepState {
  std::vector<std::vector<uint64_t>> bufs;
  explicit StepState(const std::vector<size_t>& words) {
    for (size_t w : words) bufs.emplace_back(w);
  }
  void Set(int64_t step) {
    for (size_t t = 0; t < bufs.size(); ++t) Fill(bufs[t], step, t);
  }
  SaveArgs Args(int64_t step, bool disk) const {
    SaveArgs a;
    a.step = step;
    a.tree_json = "{\"step\":" + std::to_string(step) + "}";
    a.disk = disk;
    for (size_t t = 0; t < bufs.size(); ++t) {
      SaveEntry e;
      e.name = "w" + std::to_string(t);
      e.dtype = "int64";
      e.device = "cpu";
      e.shape = {static_cast<int64_t>(bufs[t].size())};
      e.src.ptr = bufs[t].data();
      e.src.nbytes = bufs[t].size() * 8;
      e.src.elem_size = 8;
      e.src.shape = e.shape;
      a.entries.push_back(e);
    }
    return a;
  }
  // "" if the image holds exactly the content of `step`, else what differs.
  std::string Check(const unsigned char* image, const Index& idx, int64_t step) const {
    if (idx.entries.size() != bufs.size()) return "wrong number of entries";
    for (size_t t = 0; t < bufs.size(); ++t) {
      std::vector<uint64_t> want(bufs[t].size());
      Fill(want, step, t);
      if (idx.entries[t].nbytes != want.size() * 8) return "entry size differs";
      if (std::memcmp(image + idx.entries[t].offset, want.data(), want.size() * 8) != 0)
        return "entry w" + std::to_string(t) + " differs from step " + std::to_string(step);
    }
    return "";
  }
};

}  // namespace xtimer::ckpt::testing

// Helpers for the checkpoint tests: temporary folders (the shared-memory one on a tmpfs), and a
// deterministic state whose bytes depend on its step.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckpt/segment.h"

namespace xtimer::ckpt::testing {

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

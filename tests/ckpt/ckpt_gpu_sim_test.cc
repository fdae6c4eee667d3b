// The CUDA path of a save on the simulated GPU runtime (tests/simgpu, LD_LIBRARY_PATH set by
// ctest): device memory -> pinned staging buffers (asynchronous copies on a stream) -> the slot,
// with copies in flight while the threads copy; bit-identical on load; the caller's current
// device is restored. Skips when the runtime found is not the simulated one.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ckpt/cuda_copy.h"
#include "ckpt/segment.h"
#include "tests/ckpt/ckpt_test_util.h"

namespace xtimer::ckpt {
namespace {

using testing::TempDirs;

struct Rt {
  void* lib = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*Memcpy)(void*, const void*, size_t, int) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*GetDevice)(int*) = nullptr;
  bool Load(std::string* why) {
    setenv("SIMGPU_DEVICES", "2", 0);  // read by the simulated driver at its first call
    lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return *why = dlerror(), false;
    Dl_info info{};
    void* sym = dlsym(lib, "cudaMalloc");
    if (sym == nullptr || dladdr(sym, &info) == 0 || std::strstr(info.dli_fname, "simgpu") == nullptr)
      return *why = std::string("libcudart.so.13 is not the simulated one: ") + (sym ? info.dli_fname : "?"), false;
    Malloc = reinterpret_cast<decltype(Malloc)>(sym);
    Free = reinterpret_cast<decltype(Free)>(dlsym(lib, "cudaFree"));
    Memcpy = reinterpret_cast<decltype(Memcpy)>(dlsym(lib, "cudaMemcpy"));
    SetDevice = reinterpret_cast<decltype(SetDevice)>(dlsym(lib, "cudaSetDevice"));
    GetDevice = reinterpret_cast<decltype(GetDevice)>(dlsym(lib, "cudaGetDevice"));
    return Free && Memcpy && SetDevice && GetDevice;
  }
};

class GpuSim : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt_.Load(&why)) GTEST_SKIP() << why;
  }
  // Device buffer on `dev` holding `host`.
  void* Upload(int dev, const std::vector<uint8_t>& host) {
    EXPECT_EQ(rt_.SetDevice(dev), 0);
    void* d = nullptr;
    EXPECT_EQ(rt_.Malloc(&d, host.size()), 0);
    EXPECT_EQ(rt_.Memcpy(d, host.data(), host.size(), /*cudaMemcpyHostToDevice=*/1), 0);
    owned_.push_back(d);
    return d;
  }
  void TearDown() override {
    for (void* p : owned_) rt_.Free(p);
  }
  Rt rt_;
  std::vector<void*> owned_;
};

std::vector<uint8_t> Bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_F(GpuSim, StagedCopiesOverlapAndChecksumsMatch) {
  std::vector<std::vector<uint8_t>> host = {Bytes(5 << 20, 1), Bytes((3 << 20) + 3, 2), Bytes(100, 3)};
  std::vector<Source> src;
  std::vector<size_t> which;
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < host.size(); ++i) {
    src.push_back(Source{Upload(0, host[i]), host[i].size(), 1, {static_cast<int64_t>(host[i].size())}, {}, 0});
    which.push_back(i);
    sizes.push_back(host[i].size());
  }
  std::vector<uint64_t> offsets;
  uint64_t end = PlanData(sizes, &offsets);
  std::vector<uint8_t> image(end);
  std::vector<Checksum> sums(src.size());
  CudaCopyStats stats;
  Status st = CopyCudaSources(src, which, image.data(), offsets, &sums, 2, StagingConfig{1 << 20, 3}, &stats);
  ASSERT_TRUE(st.ok()) << st.message();
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(image.data() + offsets[i], host[i].data(), host[i].size())) << i;
    EXPECT_EQ(sums[i], ChecksumOf(host[i].data(), host[i].size())) << i;
  }
  EXPECT_EQ(stats.chunks, 5u + 4u + 1u);
  // Three staging buffers: while one chunk was copied into the image, two more were in flight.
  EXPECT_EQ(stats.max_in_flight, 2);
}

TEST_F(GpuSim, SaveMixesDevicesAndHostAndRestoresTheCurrentDevice) {
  TempDirs dirs("gpu");
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok());
  std::vector<uint8_t> d0 = Bytes(70 << 20, 4), d1 = Bytes(1 << 20, 5), h = Bytes(12345, 6);
  void* p0 = Upload(0, d0);
  void* p1 = Upload(1, d1);  // SIMGPU_DEVICES=2
  ASSERT_EQ(rt_.SetDevice(1), 0);
  SaveArgs a;
  a.step = 11;
  auto add = [&](const char* name, const void* p, size_t n, int dev) {
    SaveEntry e;
    e.name = name;
    e.dtype = "uint8";
    e.device = dev < 0 ? "cpu" : "cuda:" + std::to_string(dev);
    e.shape = {static_cast<int64_t>(n)};
    e.src = Source{p, n, 1, e.shape, {}, dev};
    a.entries.push_back(e);
  };
  add("gpu0", p0, d0.size(), 0);
  add("host", h.data(), h.size(), -1);
  add("gpu1", p1, d1.size(), 1);
  SaveResult r;
  std::string why;
  Status st = seg->Save(a, &r, &why);
  ASSERT_TRUE(st.ok()) << st.message();
  int dev = -1;
  rt_.GetDevice(&dev);
  EXPECT_EQ(dev, 1) << "the caller's current device was not restored";
  ReadLease lease;
  ASSERT_TRUE(seg->AcquireCurrent(Holder::kLoad, &lease).ok());
  ASSERT_TRUE(VerifyData(lease.image(), lease.index(), lease.what()).ok());
  const auto& e = lease.index().entries;
  EXPECT_EQ(e[0].device, "cuda:0");
  EXPECT_EQ(0, std::memcmp(lease.image() + e[0].offset, d0.data(), d0.size()));
  EXPECT_EQ(0, std::memcmp(lease.image() + e[1].offset, h.data(), h.size()));
  EXPECT_EQ(0, std::memcmp(lease.image() + e[2].offset, d1.data(), d1.size()));
}

}  // namespace
}  // namespace xtimer::ckpt

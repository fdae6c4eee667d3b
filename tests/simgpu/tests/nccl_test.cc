// NCCL on the simulation: real processes meeting through shared memory. Each test forks
// its ranks; the gtest parent itself never initialises CUDA. Run with SIMGPU_DEVICES=4.
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "multiproc.h"
#include "test_kernels.h"

using simtest::run_ranks;

#define NCCL_OK(x) MP_EQ(int(x), int(ncclSuccess))
#define CUDA_OK(x) MP_EQ(int(x), int(cudaSuccess))

namespace {

constexpr int kRanks = 4;

std::vector<int> all_zero(int n) { return std::vector<int>(size_t(n), 0); }

template <typename T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T) + 1) != cudaSuccess) return nullptr;
  return static_cast<T*>(p);
}

template <typename T>
int to_device(T* d, const std::vector<T>& h) {
  return cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess ? 0 : 1;
}

template <typename T>
std::vector<T> from_device(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

struct RankSetup {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

int setup(int rank, int n, const ncclUniqueId& id, RankSetup* s) {
  CUDA_OK(cudaSetDevice(rank % 4));
  CUDA_OK(cudaStreamCreate(&s->stream));
  NCCL_OK(ncclCommInitRank(&s->comm, n, id, rank));
  int count = 0, me = -1, dev = -1;
  NCCL_OK(ncclCommCount(s->comm, &count));
  NCCL_OK(ncclCommUserRank(s->comm, &me));
  NCCL_OK(ncclCommCuDevice(s->comm, &dev));
  MP_EQ(count, n);
  MP_EQ(me, rank);
  MP_EQ(dev, rank % 4);
  return 0;
}

uint16_t to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return uint16_t(b >> 16);  // exact for the small integers used here
}
float from_bf16(uint16_t v) {
  uint32_t b = uint32_t(v) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

ncclUniqueId new_id() {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  return id;
}

std::vector<std::string> shm_segments_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "simgpu-nccl-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace

TEST(Nccl, CollectivesGiveTheRightNumbers) {
  const ncclUniqueId id = new_id();
  auto codes = run_ranks(kRanks, [&](int rank) -> int {
    RankSetup s;
    if (setup(rank, kRanks, id, &s)) return 1;
    const int n = kRanks;
    const size_t count = 1000003;  // several 1 MiB chunks, not a multiple of the rank count

    // AllReduce sum / max / min / prod on float32 and int32, in place and not.
    std::vector<float> hf(count);
    for (size_t i = 0; i < count; ++i) hf[i] = float((rank + 1) * int(i % 7));
    float* sf = dev_alloc<float>(count);
    float* rf = dev_alloc<float>(count);
    MP_CHECK(sf && rf && !to_device(sf, hf));
    NCCL_OK(ncclAllReduce(sf, rf, count, ncclFloat32, ncclSum, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(sf, sf, count, ncclFloat32, ncclMax, s.comm, s.stream));  // in place
    CUDA_OK(cudaStreamSynchronize(s.stream));
    auto got = from_device(rf, count);
    auto gmax = from_device(sf, count);
    for (size_t i = 0; i < count; i += 997) {
      MP_EQ(got[i], float(10 * int(i % 7)));
      MP_EQ(gmax[i], float(4 * int(i % 7)));
    }
    MP_EQ(got[count - 1], float(10 * int((count - 1) % 7)));

    const size_t ic = 4099;
    std::vector<int32_t> hi(ic);
    for (size_t i = 0; i < ic; ++i) hi[i] = int32_t((rank + 2) * (int(i % 5) - 2));
    int32_t* si = dev_alloc<int32_t>(ic);
    int32_t *rmin = dev_alloc<int32_t>(ic), *rprod = dev_alloc<int32_t>(ic), *rsum = dev_alloc<int32_t>(ic);
    MP_CHECK(!to_device(si, hi));
    NCCL_OK(ncclAllReduce(si, rmin, ic, ncclInt32, ncclMin, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(si, rprod, ic, ncclInt32, ncclProd, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(si, rsum, ic, ncclInt32, ncclSum, s.comm, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    auto vmin = from_device(rmin, ic), vprod = from_device(rprod, ic), vsum = from_device(rsum, ic);
    for (size_t i = 0; i < ic; ++i) {
      const int f = int(i % 5) - 2;
      int emin = 1 << 30, eprod = 1, esum = 0;
      for (int r = 0; r < n; ++r) {
        emin = std::min(emin, (r + 2) * f);
        eprod *= (r + 2) * f;
        esum += (r + 2) * f;
      }
      MP_EQ(vmin[i], emin);
      MP_EQ(vprod[i], eprod);
      MP_EQ(vsum[i], esum);
    }

    // float64 / int64 / float16 / bfloat16 sums and float32 average.
    const size_t sc = 1000;
    std::vector<double> hd(sc);
    std::vector<int64_t> hl(sc);
    std::vector<_Float16> hh(sc);
    std::vector<uint16_t> hb(sc);
    for (size_t i = 0; i < sc; ++i) {
      hd[i] = 0.25 * double(rank) + double(i);
      hl[i] = (int64_t(1) << 40) * rank + int64_t(i);
      hh[i] = _Float16(float(rank + int(i % 8)));
      hb[i] = to_bf16(float(rank + int(i % 8)));
    }
    double* dd = dev_alloc<double>(sc);
    int64_t* dl = dev_alloc<int64_t>(sc);
    _Float16* dh = dev_alloc<_Float16>(sc);
    uint16_t* db = dev_alloc<uint16_t>(sc);
    float* davg = dev_alloc<float>(sc);
    MP_CHECK(!to_device(dd, hd) && !to_device(dl, hl) && !to_device(dh, hh) && !to_device(db, hb));
    std::vector<float> ha(sc, float(rank));
    MP_CHECK(!to_device(davg, ha));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(dd, dd, sc, ncclFloat64, ncclSum, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(dl, dl, sc, ncclInt64, ncclSum, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(dh, dh, sc, ncclFloat16, ncclSum, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(db, db, sc, ncclBfloat16, ncclSum, s.comm, s.stream));
    NCCL_OK(ncclAllReduce(davg, davg, sc, ncclFloat32, ncclAvg, s.comm, s.stream));
    NCCL_OK(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(s.stream));
    auto vd = from_device(dd, sc);
    auto vl = from_device(dl, sc);
    auto vh = from_device(dh, sc);
    auto vb = from_device(db, sc);
    auto va = from_device(davg, sc);
    for (size_t i = 0; i < sc; ++i) {
      MP_CHECK(vd[i] == 1.5 + 4.0 * double(i));
      MP_EQ(vl[i], (int64_t(1) << 40) * 6 + 4 * int64_t(i));
      MP_CHECK(float(vh[i]) == float(6 + 4 * int(i % 8)));
      MP_CHECK(from_bf16(vb[i]) == float(6 + 4 * int(i % 8)));
      MP_CHECK(va[i] == 1.5f);
    }

    // PreMulSum: each rank scales its own contribution.
    float scalar = 0.5f * float(rank + 1);
    ncclRedOp_t premul;
    NCCL_OK(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate, s.comm));
    std::vector<float> ones(sc, 2.0f);
    MP_CHECK(!to_device(davg, ones));
    NCCL_OK(ncclAllReduce(davg, davg, sc, ncclFloat32, premul, s.comm, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    MP_CHECK(from_device(davg, sc)[sc - 1] == 10.0f);  // 2 * 0.5 * (1+2+3+4)
    NCCL_OK(ncclRedOpDestroy(premul, s.comm));

    // AllGather, ReduceScatter, Broadcast, Reduce.
    const size_t gc = 300007;
    std::vector<int32_t> hg(gc);
    for (size_t i = 0; i < gc; ++i) hg[i] = int32_t(rank * 1000000 + int(i));
    int32_t* gs = dev_alloc<int32_t>(gc);
    int32_t* gr = dev_alloc<int32_t>(gc * n);
    MP_CHECK(!to_device(gs, hg));
    NCCL_OK(ncclAllGather(gs, gr, gc, ncclInt32, s.comm, s.stream));
    int32_t* rs_in = dev_alloc<int32_t>(gc * n);
    int32_t* rs_out = dev_alloc<int32_t>(gc);
    std::vector<int32_t> hrs(gc * n);
    for (size_t j = 0; j < gc * n; ++j) hrs[j] = int32_t(rank + int(j % 1000));
    MP_CHECK(!to_device(rs_in, hrs));
    NCCL_OK(ncclReduceScatter(rs_in, rs_out, gc, ncclInt32, ncclSum, s.comm, s.stream));
    int32_t* bc = dev_alloc<int32_t>(gc);
    std::vector<int32_t> hbc(gc, rank == 2 ? 77 : -1);
    MP_CHECK(!to_device(bc, hbc));
    NCCL_OK(ncclBroadcast(bc, bc, gc, ncclInt32, 2, s.comm, s.stream));
    int32_t* red = dev_alloc<int32_t>(gc);
    NCCL_OK(ncclReduce(gs, red, gc, ncclInt32, ncclMax, 1, s.comm, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    auto vg = from_device(gr, gc * n);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < gc; i += 1009) MP_EQ(vg[size_t(r) * gc + i], r * 1000000 + int(i));
    auto vrs = from_device(rs_out, gc);
    for (size_t i = 0; i < gc; i += 101) MP_EQ(vrs[i], 6 + 4 * int((size_t(rank) * gc + i) % 1000));
    auto vbc = from_device(bc, gc);
    MP_EQ(vbc[0], 77);
    MP_EQ(vbc[gc - 1], 77);
    if (rank == 1) {
      auto vr = from_device(red, gc);
      MP_EQ(vr[5], 3 * 1000000 + 5);
    }

    // AlltoAll, Gather, Scatter.
    const size_t ac = 70001;
    std::vector<int32_t> hx(ac * n);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < ac; ++i) hx[size_t(p) * ac + i] = rank * 1000 + p * 10 + int(i % 10);
    int32_t* xs = dev_alloc<int32_t>(ac * n);
    int32_t* xr = dev_alloc<int32_t>(ac * n);
    MP_CHECK(!to_device(xs, hx));
    NCCL_OK(ncclAlltoAll(xs, xr, ac, ncclInt32, s.comm, s.stream));
    int32_t* ga = dev_alloc<int32_t>(ac * n);
    NCCL_OK(ncclGather(xs, ga, ac, ncclInt32, 0, s.comm, s.stream));
    int32_t* sca = dev_alloc<int32_t>(ac);
    NCCL_OK(ncclScatter(xs, sca, ac, ncclInt32, 3, s.comm, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    auto vx = from_device(xr, ac * n);
    for (int p = 0; p < n; ++p) MP_EQ(vx[size_t(p) * ac + 13], p * 1000 + rank * 10 + 3);
    if (rank == 0) {
      auto vga = from_device(ga, ac * n);
      for (int p = 0; p < n; ++p) MP_EQ(vga[size_t(p) * ac + 7], p * 1000 + 7);
    }
    MP_EQ(from_device(sca, ac)[9], 3 * 1000 + rank * 10 + 9);

    // Point to point: a ring and a pairwise exchange larger than the channel, both grouped.
    const size_t pc = (3 << 20) / 4 + 5;
    std::vector<float> hp(pc, float(rank));
    float* ps = dev_alloc<float>(pc);
    float* pr = dev_alloc<float>(pc);
    float* xr2 = dev_alloc<float>(pc);
    MP_CHECK(!to_device(ps, hp));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(ps, pc, ncclFloat32, (rank + 1) % n, s.comm, s.stream));
    NCCL_OK(ncclRecv(pr, pc, ncclFloat32, (rank + n - 1) % n, s.comm, s.stream));
    NCCL_OK(ncclGroupEnd());
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(ps, pc, ncclFloat32, rank ^ 1, s.comm, s.stream));
    NCCL_OK(ncclRecv(xr2, pc, ncclFloat32, rank ^ 1, s.comm, s.stream));
    NCCL_OK(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(s.stream));
    MP_CHECK(from_device(pr, pc)[pc - 1] == float((rank + n - 1) % n));
    MP_CHECK(from_device(xr2, pc)[0] == float(rank ^ 1));

    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(s.comm, &async));
    MP_EQ(int(async), int(ncclSuccess));
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(kRanks));
  EXPECT_TRUE(shm_segments_of(getpid()).empty());
}

TEST(Nccl, AllReduce64MiBFourRanks) {
  const ncclUniqueId id = new_id();
  auto codes = run_ranks(kRanks, [&](int rank) -> int {
    RankSetup s;
    if (setup(rank, kRanks, id, &s)) return 1;
    const size_t count = (64u << 20) / sizeof(float);
    float* buf = dev_alloc<float>(count);
    MP_CHECK(buf);
    std::vector<float> h(count, float(rank + 1));
    MP_CHECK(!to_device(buf, h));
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    CUDA_OK(cudaEventRecord(a, s.stream));
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, s.comm, s.stream));
    CUDA_OK(cudaEventRecord(b, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    auto v = from_device(buf, count);
    for (size_t i = 0; i < count; i += 4093) MP_CHECK(v[i] == 10.0f);
    MP_CHECK(v[count - 1] == 10.0f);
    if (rank == 0) printf("64 MiB allreduce on 4 ranks: %.1f ms\n", ms);
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(kRanks));
}

namespace {

// Shared between the ranks of the hang test.
struct HangState {
  std::atomic<int> blocked{0};  // ranks that saw their allreduce stuck
  std::atomic<int> abort_now{0};
};

void* g_frames[64];
std::atomic<int> g_nframes{-1};

void grab_stack(int) {
  const int n = backtrace(g_frames, 64);
  g_nframes.store(n);
}

// The stream worker thread that runs our kernels (named sgpu-stream-N by the simulation).
pid_t find_thread(const char* prefix) {
  pid_t found = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name.rfind(prefix, 0) == 0) found = pid_t(atoi(e->d_name));
    }
    closedir(d);
  }
  return found;
}

int blocked_in_futex(pid_t tid) {
  std::ifstream sc("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  sc >> nr;
  return nr == SYS_futex;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;  // slower copies; TSan defers signals past the futex wait
#else
constexpr bool kSanitized = false;
#endif

// Rank 3 never calls the allreduce: the others stay blocked in a futex wait inside
// simnccl_wait_for_peers (without burning CPU) until rank 3 aborts the communicator.
TEST(Nccl, MissingRankBlocksOthersUntilAbort) {
  const ncclUniqueId id = new_id();
  auto* st = simtest::shared_object<HangState>();
  auto codes = run_ranks(kRanks, [&](int rank) -> int {
    RankSetup s;
    if (setup(rank, kRanks, id, &s)) return 1;
    float* buf = dev_alloc<float>(1024);
    if (rank == 3) {
      while (st->abort_now.load() == 0) usleep(10000);
      NCCL_OK(ncclCommAbort(s.comm));
      return 0;
    }
    NCCL_OK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, s.comm, s.stream));
    auto checks = [&]() -> int {
      // The test's own timeout: a second later the op must still be pending.
      usleep(1000 * 1000);
      MP_EQ(int(cudaStreamQuery(s.stream)), int(cudaErrorNotReady));
      const pid_t worker = find_thread("sgpu-stream");
      MP_CHECK(worker != 0);
      // Mostly asleep in futex(2): it only wakes every 100 ms to check for an abort (a loaded
      // machine may leave it runnable for a while after that).
      int in_futex = 0;
      for (int i = 0; i < 20; ++i, usleep(5000)) in_futex += blocked_in_futex(worker);
      MP_CHECK(in_futex >= 5);
      const double cpu0 = cpu_seconds();
      usleep(500 * 1000);
      MP_CHECK(cpu_seconds() - cpu0 < 0.2);  // asleep, not spinning
      if (!kSanitized) {
        // Its native stack shows the NCCL wait.
        backtrace(g_frames, 1);  // load the unwinder outside the handler
        signal(SIGUSR1, grab_stack);
        syscall(SYS_tgkill, getpid(), worker, SIGUSR1);
        for (int i = 0; i < 500 && g_nframes.load() < 0; ++i) usleep(1000);
        bool saw_wait = false;
        for (int i = 0; i < g_nframes.load(); ++i) {
          Dl_info info{};
          if (dladdr(g_frames[i], &info) && info.dli_sname && strcmp(info.dli_sname, "simnccl_wait_for_peers") == 0)
            saw_wait = true;
        }
        MP_CHECK(saw_wait);
      }
      ncclResult_t async = ncclInternalError;
      NCCL_OK(ncclCommGetAsyncError(s.comm, &async));
      MP_EQ(int(async), int(ncclSuccess));  // stuck is not an error
      return 0;
    };
    const int rc = checks();
    // Whatever the checks found, rank 3 aborts once all three are done checking.
    if (st->blocked.fetch_add(1) + 1 == 3) st->abort_now.store(1);
    if (rc) return rc;
    // The abort unblocks us with an error.
    CUDA_OK(cudaStreamSynchronize(s.stream));
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(s.comm, &async));
    MP_EQ(int(async), int(ncclRemoteError));
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(kRanks));
  EXPECT_TRUE(shm_segments_of(getpid()).empty());
}

TEST(Nccl, SplitMakesSubCommunicators) {
  const ncclUniqueId id = new_id();
  auto codes = run_ranks(kRanks, [&](int rank) -> int {
    RankSetup s;
    if (setup(rank, kRanks, id, &s)) return 1;
    // Colour by parity, reverse order by key.
    ncclComm_t sub = nullptr;
    NCCL_OK(ncclCommSplit(s.comm, rank % 2, -rank, &sub, nullptr));
    MP_CHECK(sub != nullptr);
    int count = 0, me = -1;
    NCCL_OK(ncclCommCount(sub, &count));
    NCCL_OK(ncclCommUserRank(sub, &me));
    MP_EQ(count, 2);
    MP_EQ(me, rank < 2 ? 1 : 0);
    int32_t* v = dev_alloc<int32_t>(1);
    std::vector<int32_t> h{rank};
    MP_CHECK(!to_device(v, h));
    NCCL_OK(ncclAllReduce(v, v, 1, ncclInt32, ncclSum, sub, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    MP_EQ(from_device(v, 1)[0], rank % 2 ? 4 : 2);
    // Rank 3 opts out; the other three form one communicator.
    ncclComm_t three = nullptr;
    NCCL_OK(ncclCommSplit(s.comm, rank == 3 ? NCCL_SPLIT_NOCOLOR : 7, rank, &three, nullptr));
    if (rank == 3) {
      MP_CHECK(three == nullptr);
    } else {
      NCCL_OK(ncclCommCount(three, &count));
      MP_EQ(count, 3);
      NCCL_OK(ncclAllReduce(v, v, 1, ncclInt32, ncclSum, three, s.stream));
      CUDA_OK(cudaStreamSynchronize(s.stream));
      NCCL_OK(ncclCommDestroy(three));
    }
    NCCL_OK(ncclCommDestroy(sub));
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(kRanks));
  EXPECT_TRUE(shm_segments_of(getpid()).empty());
}

TEST(Nccl, GraphCaptureReplaysTheCollective) {
  const ncclUniqueId id = new_id();
  auto codes = run_ranks(2, [&](int rank) -> int {
    RankSetup s;
    if (setup(rank, 2, id, &s)) return 1;
    cudaStream_t cs;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    float* v = dev_alloc<float>(256);
    std::vector<float> h(256, 3.0f);
    MP_CHECK(!to_device(v, h));
    CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    NCCL_OK(ncclAllReduce(v, v, 256, ncclFloat32, ncclSum, s.comm, cs));
    cudaGraph_t g;
    CUDA_OK(cudaStreamEndCapture(cs, &g));
    MP_CHECK(from_device(v, 256)[0] == 3.0f);  // captured, not run
    cudaGraphExec_t x;
    CUDA_OK(cudaGraphInstantiate(&x, g, 0));
    CUDA_OK(cudaGraphLaunch(x, cs));
    CUDA_OK(cudaGraphLaunch(x, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    MP_CHECK(from_device(v, 256)[255] == 12.0f);  // 3 -> 6 -> 12
    CUDA_OK(cudaGraphExecDestroy(x));
    CUDA_OK(cudaGraphDestroy(g));
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(2));
}

TEST(Nccl, InitAllInOneProcess) {
  auto codes = run_ranks(1, [&](int) -> int {
    ncclComm_t comms[2];
    const int devs[2] = {0, 1};
    NCCL_OK(ncclCommInitAll(comms, 2, devs));
    cudaStream_t st[2];
    int32_t* buf[2];
    for (int i = 0; i < 2; ++i) {
      CUDA_OK(cudaSetDevice(i));
      CUDA_OK(cudaStreamCreate(&st[i]));
      buf[i] = dev_alloc<int32_t>(100);
      MP_CHECK(!to_device(buf[i], std::vector<int32_t>(100, i + 5)));
    }
    NCCL_OK(ncclGroupStart());
    for (int i = 0; i < 2; ++i) NCCL_OK(ncclAllReduce(buf[i], buf[i], 100, ncclInt32, ncclSum, comms[i], st[i]));
    NCCL_OK(ncclGroupEnd());
    for (int i = 0; i < 2; ++i) {
      CUDA_OK(cudaStreamSynchronize(st[i]));
      MP_EQ(from_device(buf[i], 100)[99], 11);
      int dev = -1;
      NCCL_OK(ncclCommCuDevice(comms[i], &dev));
      MP_EQ(dev, i);
      NCCL_OK(ncclCommDestroy(comms[i]));
    }
    return 0;
  });
  EXPECT_EQ(codes, all_zero(1));
}

TEST(Nccl, NetworkRateStretchesTransfers) {
  const ncclUniqueId id = new_id();
  auto codes = run_ranks(2, [&](int rank) -> int {
    setenv("SIMGPU_NET_GBPS", "1", 1);  // read once, at the first collective
    RankSetup s;
    if (setup(rank, 2, id, &s)) return 1;
    const size_t bytes = 8u << 20;
    char* v = dev_alloc<char>(bytes);
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    CUDA_OK(cudaEventRecord(a, s.stream));
    NCCL_OK(ncclAllReduce(v, v, bytes / 4, ncclFloat32, ncclSum, s.comm, s.stream));
    CUDA_OK(cudaEventRecord(b, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    // Bus bytes 2(n-1)/n * 8 MiB = 8 MiB at 1 GB/s: 8.4 ms at least. No upper bound: the time
    // also holds the wait for the peer, which a loaded machine can stretch at will.
    MP_CHECK(ms > 8.0f);
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(2));
}

// SIMGPU_CONTROL (common/control.h): faults a test turns on mid-run. A slow node's network
// slows every member of its communicators (a ring goes at its slowest link), a slow GPU only its
// own kernels and GEMMs.
float timed_allreduce(const RankSetup& s, char* v, size_t bytes) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s.stream);
  ncclAllReduce(v, v, bytes / 4, ncclFloat32, ncclSum, s.comm, s.stream);
  cudaEventRecord(b, s.stream);
  cudaStreamSynchronize(s.stream);
  float ms = -1;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

TEST(Faults, SlowNodeSlowsEveryMember) {
  const ncclUniqueId id = new_id();
  char path[] = "/tmp/simgpu-control-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto codes = run_ranks(kRanks, [&](int rank) -> int {
    setenv("SIMGPU_NET_GBPS", "100", 1);
    setenv("SIMGPU_CONTROL", path, 1);
    setenv("SIMGPU_NODE", rank < 2 ? "0" : "1", 1);
    RankSetup s;
    if (setup(rank, kRanks, id, &s)) return 1;
    const size_t bytes = 4u << 20;
    char* v = dev_alloc<char>(bytes);
    MP_CHECK(timed_allreduce(s, v, bytes) >= 0);  // fast: 6 MB of bus bytes at 100 GB/s
    if (rank == 0) std::ofstream(path) << "node=1 net_gbps=0.5  # the network of ranks 2 and 3\n";
    NCCL_OK(ncclAllReduce(v, v, 1, ncclFloat32, ncclSum, s.comm, s.stream));  // the file is written now
    CUDA_OK(cudaStreamSynchronize(s.stream));
    usleep(60000);  // each process looks at the file again after 50 ms
    // 2(n-1)/n * 4 MiB = 6.3 MB at 0.5 GB/s: 12.6 ms at least, on ranks 0 and 1 too.
    const float ms = timed_allreduce(s, v, bytes);
    if (ms < 12.0f) fprintf(stderr, "rank %d: all-reduce took %.2f ms\n", rank, ms);
    MP_CHECK(ms >= 12.0f);
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  unlink(path);
  EXPECT_EQ(codes, all_zero(kRanks));
}

TEST(Faults, SlowGpuStretchesItsOwnKernels) {
  char path[] = "/tmp/simgpu-control-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto codes = run_ranks(2, [&](int rank) -> int {
    setenv("SIMGPU_CONTROL", path, 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    CUDA_OK(cudaSetDevice(rank));
    cudaStream_t st;
    CUDA_OK(cudaStreamCreate(&st));
    auto kernel_ms = [&]() -> float {
      int64_t ns = 5000000;
      void* args[] = {&ns};
      // Queued behind a held kernel: the kernel's device time alone, whatever the host's latency.
      return float(simtest::device_ms(st, [&] {
        cudaLaunchKernel(reinterpret_cast<const void*>(simgpu_test_sleep), dim3(1), dim3(1), args, 0, st);
      }));
    };
    const float before = kernel_ms();
    MP_CHECK(before > 4.9f && before < 5.5f);  // device clock: exact even on a loaded machine
    if (rank == 0) std::ofstream(path) << "rank=1 gpu_factor=3\n";
    for (int i = 0; i < 1000 && std::ifstream(path).peek() == EOF; ++i) usleep(10000);
    usleep(60000);  // each process looks at the file again after 50 ms
    const float after = kernel_ms();
    if (rank == 1) {
      MP_CHECK(after > 14.9f && after < 15.5f);
    } else {
      MP_CHECK(after > 4.9f && after < 5.5f);
    }
    return 0;
  });
  unlink(path);
  EXPECT_EQ(codes, all_zero(2));
}

// The rank's last operation must stay stuck (asleep, not failed) for half a second; once every
// rank has seen its own, rank 0 aborts the communicator and the others' operations end with it.
int StuckUntilAbort(int rank, RankSetup& s, HangState* st) {
  usleep(500 * 1000);
  const int pending = cudaStreamQuery(s.stream) == cudaErrorNotReady;
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(s.comm, &async));
  if (st->blocked.fetch_add(1) + 1 == kRanks) st->abort_now.store(1);
  while (st->abort_now.load() == 0) usleep(10000);
  MP_CHECK(pending);
  MP_EQ(int(async), int(ncclSuccess));  // stuck, not failed
  if (rank == 0) NCCL_OK(ncclCommAbort(s.comm));
  if (rank != 0) {
    CUDA_OK(cudaStreamSynchronize(s.stream));
    NCCL_OK(ncclCommDestroy(s.comm));
  }
  return 0;
}

// nccl_blackhole=1: the chosen rank's collectives never exchange; every member waits (asleep,
// nothing fails) until the communicator is aborted, as behind a dead link.
TEST(Faults, BlackholedRankLeavesEveryMemberWaiting) {
  char path[] = "/tmp/simgpu-control-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const ncclUniqueId id = new_id();
  auto* st = simtest::shared_object<HangState>();
  auto codes = run_ranks(kRanks, [&](int rank) -> int {
    setenv("SIMGPU_CONTROL", path, 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    RankSetup s;
    if (setup(rank, kRanks, id, &s)) return 1;
    float* buf = dev_alloc<float>(1024);
    NCCL_OK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, s.comm, s.stream));
    CUDA_OK(cudaStreamSynchronize(s.stream));  // healthy before the fault
    if (rank == 0) std::ofstream(path) << "rank=2 nccl_blackhole=1\n";
    for (int i = 0; i < 1000 && std::ifstream(path).peek() == EOF; ++i) usleep(10000);
    usleep(60000);  // each process looks at the file again after 50 ms
    NCCL_OK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, s.comm, s.stream));
    return StuckUntilAbort(rank, s, st);
  });
  unlink(path);
  EXPECT_EQ(codes, all_zero(kRanks));
}

TEST(Nccl, MisuseIsReported) {
  auto codes = run_ranks(1, [&](int) -> int {
    int v = 0;
    NCCL_OK(ncclGetVersion(&v));
    MP_EQ(v, 22809);
    MP_CHECK(strlen(ncclGetErrorString(ncclRemoteError)) > 0);
    ncclUniqueId bogus;
    memset(&bogus, 0, sizeof bogus);
    ncclComm_t c = nullptr;
    MP_EQ(int(ncclCommInitRank(&c, 1, bogus, 0)), int(ncclInvalidArgument));
    const ncclUniqueId id = new_id();
    NCCL_OK(ncclCommInitRank(&c, 1, id, 0));
    float* buf = dev_alloc<float>(16);
    MP_EQ(int(ncclBroadcast(buf, buf, 16, ncclFloat32, 5, c, nullptr)), int(ncclInvalidArgument));
    MP_EQ(int(ncclAllReduce(buf, buf, 16, ncclFloat8e4m3, ncclSum, c, nullptr)), int(ncclInvalidArgument));
    MP_EQ(int(ncclGroupEnd()), int(ncclInvalidUsage));
    // A single rank's collective completes locally.
    NCCL_OK(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, c, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    NCCL_OK(ncclCommDestroy(c));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(1));
}

// NCCL matches calls by their order on a communicator, not by what they are. A rank that skips
// an all-reduce of the same size as its next one pairs that next call with its peers' skipped
// one: both complete, with mixed-up data.
TEST(Nccl, CallsMatchByOrderSoASameSizeSkipMixesData) {
  const ncclUniqueId id = new_id();
  auto codes = run_ranks(2, [&](int rank) -> int {
    RankSetup s;
    if (setup(rank, 2, id, &s)) return 1;
    float* v = dev_alloc<float>(4);
    auto all_reduce = [&](float x) -> float {
      if (to_device(v, std::vector<float>(4, x))) return -1;
      if (ncclAllReduce(v, v, 4, ncclFloat32, ncclSum, s.comm, s.stream) != ncclSuccess) return -1;
      if (cudaStreamSynchronize(s.stream) != cudaSuccess) return -1;
      return from_device(v, 4)[0];
    };
    if (rank == 0) {
      MP_EQ(all_reduce(1), 21.0f);  // its first call met rank 1's second
      MP_EQ(all_reduce(10), 310.0f);
    } else {  // skips the call that gives 1
      MP_EQ(all_reduce(20), 21.0f);
      MP_EQ(all_reduce(300), 310.0f);
    }
    NCCL_OK(ncclCommDestroy(s.comm));
    return 0;
  });
  EXPECT_EQ(codes, all_zero(2));
}

// Calls that do not fit (another size, another operation) are undefined in NCCL: the
// simulation hangs, no call fails, until the communicator is aborted.
TEST(Nccl, MismatchedSizeOrOperationHangsUntilAbort) {
  for (int other_op = 0; other_op < 2; ++other_op) {
    const ncclUniqueId id = new_id();
    auto* st = simtest::shared_object<HangState>();
    auto codes = run_ranks(kRanks, [&](int rank) -> int {
      RankSetup s;
      if (setup(rank, kRanks, id, &s)) return 1;
      float* buf = dev_alloc<float>(4096);
      if (rank == 1 && other_op) {
        NCCL_OK(ncclAllGather(buf, buf, 1024, ncclFloat32, s.comm, s.stream));
      } else {
        const size_t count = rank == 1 ? 2048 : 1024;
        NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, s.comm, s.stream));
      }
      return StuckUntilAbort(rank, s, st);
    });
    EXPECT_EQ(codes, all_zero(kRanks)) << (other_op ? "all-gather against all-reduce" : "another size");
    EXPECT_TRUE(shm_segments_of(getpid()).empty());
  }
}

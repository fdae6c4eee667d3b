// kill -9 of the saving process at random points during memory saves, 50 times: every load
// returns the previous or the new step, bit-identical to what was saved at that step.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "ckpt/segment.h"
#include "tests/ckpt/ckpt_test_util.h"

namespace xtimer::ckpt {
namespace {

using testing::StepState;
using testing::TempDirs;

struct Shared {                    // parent <-> child, in a shared anonymous mapping
  std::atomic<int64_t> begun{-1};  // step whose save started
  std::atomic<int64_t> done{-1};   // step whose save returned
  std::atomic<int64_t> save_us{0};
};

constexpr std::vector<size_t> Sizes() { return {1 << 20, 3 << 19, 4097}; }  // ~20 MiB of int64

[[noreturn]] void Child(const TempDirs& dirs, Shared* sh, int64_t first) {
  std::unique_ptr<Segment> seg;
  Status st = Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg);
  if (st.ok()) st = seg->Claim(3, true);
  if (!st.ok()) {
    std::fprintf(stderr, "child: %s\n", st.message().c_str());
    _exit(10);
  }
  StepState state(Sizes());
  for (int64_t step = first;; ++step) {
    state.Set(step);
    sh->begun.store(step);
    auto t0 = std::chrono::steady_clock::now();
    SaveResult r;
    std::string why;
    st = seg->Save(state.Args(step, false), &r, &why);
    if (!st.ok() || r != SaveResult::kSaved) {
      std::fprintf(stderr, "child: step %lld: %s %s\n", static_cast<long long>(step), st.message().c_str(),
                   why.c_str());
      _exit(11);
    }
    sh->save_us.store(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    sh->done.store(step);
  }
}

TEST(KillDuringSave, EveryLoadIsThePreviousOrTheNewStepBitIdentical) {
  TempDirs dirs("kill");
  auto* sh =
      static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(sh, MAP_FAILED);
  new (sh) Shared;
  uint64_t seed = static_cast<uint64_t>(time(nullptr));
  std::mt19937_64 rng(seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  StepState checker(Sizes());
  int64_t last_loaded = -1, next_first = 1;
  int mid_previous = 0, mid_new = 0, between = 0;
  for (int iter = 0; iter < 50; ++iter) {
    sh->begun.store(-1);
    sh->done.store(-1);
    pid_t pid = fork();
    if (pid == 0) Child(dirs, sh, next_first);
    // Let it complete a save or two (so that the timing is known), then kill it at a random
    // point within about one save.
    int64_t wait_for = next_first + static_cast<int64_t>(rng() % 2);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (sh->begun.load() < wait_for + 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    ASSERT_GE(sh->begun.load(), wait_for + 1) << "the child made no progress";
    int64_t window = std::max<int64_t>(sh->save_us.load() * 3 / 2, 200);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(rng() % window)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << status;
    const int64_t begun = sh->begun.load(), done = sh->done.load();

    // A new process' view: what a restarted training process loads.
    std::unique_ptr<Segment> seg;
    ASSERT_TRUE(Segment::Open(dirs.shm() + "/" + Segment::BaseName(dirs.ckpt(), 0) + ".ctl", false, &seg).ok());
    ReadLease lease;
    Status st = seg->AcquireCurrent(Holder::kLoad, &lease);
    ASSERT_TRUE(st.ok()) << "iteration " << iter << ": " << st.message();
    int64_t step = lease.index().info.step;
    ASSERT_TRUE(step == done || step == begun)
        << "iteration " << iter << ": loaded step " << step << ", last done " << done << ", begun " << begun;
    ASSERT_GE(step, last_loaded);
    ASSERT_TRUE(VerifyData(lease.image(), lease.index(), lease.what()).ok());
    std::string diff = checker.Check(lease.image(), lease.index(), step);
    ASSERT_EQ(diff, "") << "iteration " << iter;
    if (begun == done) ++between;           // killed after a save returned
    else if (step == done) ++mid_previous;  // killed inside a save: the previous snapshot
    else ++mid_new;                         // inside a save, after its flip
    last_loaded = step;
    next_first = begun + 1;
  }
  std::printf("50 kills: %d inside a save (%d loaded the previous step, %d the new one), %d between saves\n",
              mid_previous + mid_new, mid_previous, mid_new, between);
  // Kills must have landed inside saves, not only between them.
  EXPECT_GT(mid_previous + mid_new, 0);
  munmap(sh, sizeof(Shared));
}

}  // namespace
}  // namespace xtimer::ckpt

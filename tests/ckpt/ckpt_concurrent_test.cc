// The slot protocol under concurrency, in one process so that ThreadSanitizer sees every access
// (scripts/test.sh --tsan runs the tests labelled "concurrent"): a writer saving (some saves
// wanted on disk), a persister writing those slots (what the saver does), a loader reading the
// current slot, all on one mapping; plus a real Saver running its loop until stopped.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "ckpt/persist.h"
#include "ckpt/saver.h"
#include "ckpt/segment.h"
#include "tests/ckpt/ckpt_test_util.h"

namespace xtimer::ckpt {
namespace {

using testing::FakeState;
using testing::StepState;
using testing::TempDirs;

// What xtimer_run does between rounds: the workers died; before new ones load, the agent waits
// for its in-process saver to write their newest memory snapshots.
TEST(Concurrent, WaitUntilPersistedReturnsOnceADeadProcessSnapshotIsOnDisk) {
  TempDirs dirs("wait-persisted");
  // The training process, forked while this process has one thread (ThreadSanitizer forbids
  // threads after a fork of a threaded process; hence this test comes first in the file, and
  // ctest runs each test in its own process): on a byte from the pipe it saves step 7 to
  // memory only and dies without closing its segment.
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    std::unique_ptr<Segment> seg;
    FakeState state(7, {5000, 17});
    SaveResult r;
    std::string w;
    bool ok = Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok() && seg->Claim(2, true).ok() &&
              seg->Save(state.Args(7, false), &r, &w).ok();
    if (seg) seg->JoinPrefault();  // the first save's thread: ended, or TSan counts it leaked
    _exit(ok ? 0 : 1);
  }
  close(go[0]);

  Saver saver({dirs.shm(), -1, 3000, false});
  std::string why;
  ASSERT_TRUE(saver.AcquireNodeLock(&why)) << why;
  EXPECT_FALSE(saver.WaitUntilPersisted(0.1)) << "Run() is not running: nothing can be waited for";
  std::atomic<bool> stop{false};
  std::thread run([&] { saver.Run(&stop); });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    const std::string& shm;
    ~Join() {
      stop.store(true);
      WakeSaver(shm);
      if (t.joinable()) t.join();
    }
  } join{stop, run, dirs.shm()};
  bool started = false;  // false until Run() is under way on its thread
  for (int i = 0; i < 500 && !started; ++i) started = saver.WaitUntilPersisted(30) || (usleep(10000), false);
  ASSERT_TRUE(started) << "nothing pending: the wait ends after one scan";

  ASSERT_EQ(write(go[1], "g", 1), 1);
  close(go[1]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(std::filesystem::exists(RankFile(dirs.ckpt(), 7, 0)));

  // The saver sleeps up to 3 s between scans: the file is there on return only if the wait woke
  // it and waited for a whole scan.
  ASSERT_TRUE(saver.WaitUntilPersisted(30));
  XtcFile f;
  Status st = XtcFile::Open(RankFile(dirs.ckpt(), 7, 0), &f);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(f.Verify().ok());
  stop.store(true);
  WakeSaver(dirs.shm());
  run.join();
  EXPECT_FALSE(saver.WaitUntilPersisted(0.1)) << "Run() has returned";
}

TEST(Concurrent, WriterPersisterLoaderAndSaverAgree) {
  TempDirs dirs("concurrent");
  const std::vector<size_t> sizes = {20000, 3000, 1};
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok());
  ASSERT_TRUE(seg->Claim(2, true).ok());
  StepState state(sizes);
  {  // the first save maps both slots at their final size before the other threads start
    state.Set(1);
    SaveResult r;
    std::string why;
    ASSERT_TRUE(seg->Save(state.Args(1, false), &r, &why).ok());
  }
  constexpr int64_t kLast = 150;
  std::atomic<bool> stop{false}, writer_done{false};
  std::atomic<int> loads{0}, persisted{0}, skipped{0};
  std::string writer_error, loader_error, persister_error;

  std::thread writer([&] {
    for (int64_t step = 2; step <= kLast; ++step) {
      state.Set(step);
      SaveArgs a = state.Args(step, step % 5 == 0);
      a.threads = 2;
      a.wait_if_busy = a.disk;
      SaveResult r;
      std::string why;
      Status st = seg->Save(a, &r, &why);
      if (!st.ok()) {
        writer_error = st.message();
        break;
      }
      if (r == SaveResult::kSkipped) skipped.fetch_add(1);
    }
    writer_done.store(true);
  });
  std::thread persister([&] {
    while (!writer_done.load() || A(seg->ctl()->slot[0].disk).load() == kDiskWanted ||
           A(seg->ctl()->slot[1].disk).load() == kDiskWanted) {
      for (int slot = 0; slot < 2; ++slot) {
        if (A(seg->ctl()->slot[slot].disk).load() != kDiskWanted) continue;
        int64_t step = -1;
        Status st = PersistSlot(*seg, slot, nullptr, &step);
        if (st.ok()) persisted.fetch_add(1);
        else if (st.code() != Status::Code::kBusy) persister_error = st.message();
      }
      std::this_thread::yield();
    }
  });
  std::thread loader([&] {
    StepState check(sizes);
    int64_t last = 0;
    while (!writer_done.load()) {
      ReadLease lease;
      Status st = seg->AcquireCurrent(Holder::kLoad, &lease);
      if (st.code() == Status::Code::kBusy) continue;
      if (!st.ok()) {
        loader_error = st.message();
        return;
      }
      int64_t step = lease.index().info.step;
      std::string diff = check.Check(lease.image(), lease.index(), step);
      if (!diff.empty() || step < last) {
        loader_error = "step " + std::to_string(step) + " after " + std::to_string(last) + ": " + diff;
        return;
      }
      last = step;
      loads.fetch_add(1);
    }
  });
  std::thread saver_thread([&] {
    Saver saver({dirs.shm(), -1, 5, false});
    std::string why;
    if (saver.AcquireNodeLock(&why)) saver.Run(&stop);
  });
  writer.join();
  persister.join();
  loader.join();
  stop.store(true);
  saver_thread.join();
  EXPECT_EQ(writer_error, "");
  EXPECT_EQ(loader_error, "");
  EXPECT_EQ(persister_error, "");
  EXPECT_GT(loads.load(), 0);
  EXPECT_EQ(seg->SlotStep(seg->CurrentSlot()), kLast);  // a disk save: never skipped
  // Every disk save (every 5th step) reached the disk, checksums intact.
  for (int64_t step = 5; step <= kLast; step += 5) {
    XtcFile f;
    Status st = XtcFile::Open(RankFile(dirs.ckpt(), step, 0), &f);
    if (st.code() == Status::Code::kNotFound) {
      // keep = 2: older steps were deleted once newer ones were complete
      EXPECT_LT(step, kLast - 5) << "step " << step << " missing";
      continue;
    }
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(f.Verify().ok());
  }
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), kLast);
  std::printf("%d loads, %d slots persisted by the persister thread, %d memory saves skipped\n", loads.load(),
              persisted.load(), skipped.load());
}

}  // namespace
}  // namespace xtimer::ckpt

// The slot protocol under concurrency, in one process so that ThreadSanitizer sees every access
// (scripts/test.sh --tsan runs the tests labelled "concurrent"): a writer saving (some saves
// wanted on disk), a persister writing those slots (what the saver does), a loader reading the
// current slot, all on one mapping; plus a real Saver running its loop until stopped.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "ckpt/persist.h"
#include "ckpt/saver.h"
#include "ckpt/segment.h"
#include "tests/ckpt/ckpt_test_util.h"

namespace xtimer::ckpt {
namespace {

using testing::StepState;
using testing::TempDirs;

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

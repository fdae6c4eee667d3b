// The checkpoint core against hostile folders: a FIFO or a device where a rank file, `latest` or
// a segment should be (refused at once, never waited on), a rank file copied into another step's
// folder or under another rank's name (refused, never loaded as that step), `latest` naming
// another world size, and temp files a killed writer left behind (removed by the next write).
// Before the common file rule (common/regular_file.h) the FIFO tests blocked in open(2) until the
// test's timeout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpointer.h"
#include "ckpt/image.h"
#include "ckpt/persist.h"
#include "ckpt/segment.h"
#include "tests/ckpt/ckpt_test_util.h"

namespace xtimer::ckpt {
namespace {

using testing::FakeState;
using testing::TempDirs;

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A one-entry rank file of `step`, `rank` of `world` at DIR/<step>/rank_<rank>.xtc.
void WriteRankFile(const std::string& ckpt_dir, int64_t step, int rank, int world) {
  ASSERT_EQ(testing::WriteOneTensorRankFile(ckpt_dir, step, rank, world,
                                            std::vector<uint8_t>(64, static_cast<uint8_t>(step))),
            "");
}

void Copy(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

void MakeOld(const std::string& path) {
  struct timeval tv[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimes(path.c_str(), tv), 0);
}

TEST(HostileFolder, AFifoAsARankFileIsRefusedAtOnce) {
  TempDirs dirs("fifo");
  WriteRankFile(dirs.ckpt(), 4, 0, 1);
  std::filesystem::create_directories(StepDir(dirs.ckpt(), 5));
  std::string fifo = RankFile(dirs.ckpt(), 5, 0);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  XtcFile f;
  Status st = XtcFile::Open(fifo, &f);  // blocked in open(2) before the rule
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), fifo + " is a FIFO, not a regular file")) << st.message();

  std::vector<DiskStep> steps;
  ASSERT_TRUE(ScanDisk(dirs.ckpt(), &steps).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 5);
  EXPECT_EQ(steps[0].world_size, 0);
  EXPECT_TRUE(Has(steps[0].problem, "FIFO")) << steps[0].problem;
  EXPECT_TRUE(steps[1].complete);
  EXPECT_TRUE(steps[1].problem.empty()) << steps[1].problem;
}

TEST(HostileFolder, AFifoOrDeviceAsLatestIsANote) {
  TempDirs dirs("latest-fifo");
  WriteRankFile(dirs.ckpt(), 4, 0, 1);
  std::string latest = dirs.ckpt() + "/latest";
  ASSERT_EQ(mkfifo(latest.c_str(), 0644), 0);
  std::string note;
  EXPECT_EQ(ReadLatest(dirs.ckpt(), &note), -1);
  EXPECT_TRUE(Has(note, "is a FIFO")) << note;
  unlink(latest.c_str());
  ASSERT_EQ(symlink("/dev/zero", latest.c_str()), 0);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), &note), -1);
  EXPECT_TRUE(Has(note, "is a character device")) << note;
}

TEST(HostileFolder, AFifoAsASegmentOrSlotIsRefused) {
  TempDirs dirs("seg-fifo");
  std::string ctl = dirs.shm() + "/xtimer-ckpt-0000000000000000-r0.ctl";
  ASSERT_EQ(mkfifo(ctl.c_str(), 0600), 0);
  std::unique_ptr<Segment> seg;
  Status st = Segment::Open(ctl, /*writable=*/false, &seg);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "FIFO")) << st.message();

  // A real segment whose slot file was replaced by a FIFO: the read-only reader (inspect) refuses it.
  std::unique_ptr<Segment> owner;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &owner).ok());
  ASSERT_TRUE(owner->Claim(1, true).ok());
  FakeState s(3, {4096});
  SaveResult r;
  std::string why;
  Status saved = owner->Save(s.Args(3), &r, &why);
  ASSERT_TRUE(saved.ok()) << saved.message();
  int slot = owner->CurrentSlot();
  ASSERT_GE(slot, 0);
  std::string slot_path = owner->slot_path(slot);
  ASSERT_EQ(unlink(slot_path.c_str()), 0);
  ASSERT_EQ(mkfifo(slot_path.c_str(), 0600), 0);
  std::unique_ptr<Segment> reader;
  ASSERT_TRUE(Segment::Open(owner->ctl_path(), /*writable=*/false, &reader).ok());
  ReadLease lease;
  st = reader->AcquireSlot(slot, Holder::kInspect, &lease);  // blocked in open(2) before
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "FIFO")) << st.message();
}

TEST(HostileFolder, AFileCopiedIntoAnotherStepIsNotThatStep) {
  TempDirs dirs("copied");
  WriteRankFile(dirs.ckpt(), 2, 0, 1);
  Copy(RankFile(dirs.ckpt(), 2, 0), RankFile(dirs.ckpt(), 3, 0));
  XtcFile f;
  Status st = XtcFile::Open(RankFile(dirs.ckpt(), 3, 0), &f);
  EXPECT_EQ(st.code(), Status::Code::kCorrupt);
  EXPECT_TRUE(Has(st.message(), "holds step 2, rank 0 of 1: a file of another step")) << st.message();
  EXPECT_TRUE(Has(st.message(), "not loaded as step 3")) << st.message();

  std::vector<DiskStep> steps;
  ASSERT_TRUE(ScanDisk(dirs.ckpt(), &steps).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 3);
  EXPECT_FALSE(steps[0].complete);
  EXPECT_TRUE(Has(steps[0].problem, "another step")) << steps[0].problem;
  EXPECT_TRUE(steps[1].complete);

  // Under another rank's name.
  Copy(RankFile(dirs.ckpt(), 2, 0), RankFile(dirs.ckpt(), 2, 1));
  st = XtcFile::Open(RankFile(dirs.ckpt(), 2, 1), &f);
  EXPECT_EQ(st.code(), Status::Code::kCorrupt);
  EXPECT_TRUE(Has(st.message(), "a file of another rank")) << st.message();

  // The same file outside any step folder reads fine (inspect of a copy, xtc.py).
  std::string lone = dirs.ckpt() + "/copy.xtc";
  Copy(RankFile(dirs.ckpt(), 2, 0), lone);
  EXPECT_TRUE(XtcFile::Open(lone, &f).ok());
}

TEST(HostileFolder, LatestNamingAnotherWorldSizeIsAProblem) {
  TempDirs dirs("tracker");
  WriteRankFile(dirs.ckpt(), 6, 0, 1);
  bool complete = false;
  ASSERT_TRUE(FinishStep(dirs.ckpt(), 6, 1, 3, &complete).ok());
  ASSERT_TRUE(complete);
  std::vector<DiskStep> steps;
  ASSERT_TRUE(ScanDisk(dirs.ckpt(), &steps).ok());
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].problem.empty()) << steps[0].problem;
  {
    std::ofstream(dirs.ckpt() + "/latest") << R"({"format":"xtimer-ckpt-latest","version":1,"step":6,"world_size":4})";
  }
  ASSERT_TRUE(ScanDisk(dirs.ckpt(), &steps).ok());
  EXPECT_TRUE(Has(steps[0].problem, "world size 4, its files say 1")) << steps[0].problem;
}

TEST(HostileFolder, TheNextWriterRemovesTempFilesAKilledWriterLeft) {
  TempDirs dirs("temps");
  WriteRankFile(dirs.ckpt(), 5, 0, 1);
  std::string dead = StepDir(dirs.ckpt(), 5) + "/rank_0.xtc.tmp.99999-0";   // killed mid-write, long ago
  std::string live = StepDir(dirs.ckpt(), 5) + "/rank_1.xtc.tmp.99998-0";   // a writer still holds it
  std::string fresh = StepDir(dirs.ckpt(), 5) + "/rank_2.xtc.tmp.99997-0";  // just created
  std::string other = StepDir(dirs.ckpt(), 5) + "/notes.txt.tmp.1";         // not ours
  // `latest` is written only under the folder's lock: a temp file of it is a dead writer's, however new.
  std::string dead_latest = dirs.ckpt() + "/latest.tmp.99995";
  std::ofstream(dead_latest) << R"({"format":"xtimer-ckpt-lat)";
  for (const std::string& p : {dead, live, fresh, other}) std::ofstream(p) << std::string(1 << 20, 'x');
  MakeOld(dead);
  MakeOld(live);
  MakeOld(other);
  int held = open(live.c_str(), O_RDONLY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);

  // The next write (here a training process without a saver) cleans up before it writes.
  CheckpointerOptions o;
  o.ckpt_dir = dirs.ckpt();
  o.shm_dir = dirs.shm();
  std::unique_ptr<RankCheckpointer> c;
  ASSERT_TRUE(RankCheckpointer::Create(o, &c).ok());
  FakeState s(9, {4096});
  bool saved = false;
  std::string why;
  ASSERT_TRUE(c->Save(s.Args(9, true), &saved, &why).ok());
  ASSERT_TRUE(c->Wait(30, nullptr).ok());
  struct stat st;
  EXPECT_NE(stat(dead.c_str(), &st), 0) << "the dead writer's temp file is still there";
  EXPECT_NE(stat(dead_latest.c_str(), &st), 0) << "the dead writer's temp file of latest is still there";
  EXPECT_EQ(stat(live.c_str(), &st), 0) << "a live writer's temp file was removed";
  EXPECT_EQ(stat(fresh.c_str(), &st), 0) << "a temp file created a moment ago was removed";
  EXPECT_EQ(stat(other.c_str(), &st), 0) << "a file that is not ours was removed";
  EXPECT_EQ(stat(RankFile(dirs.ckpt(), 9, 0).c_str(), &st), 0);
  close(held);
  c->Close();
}

}  // namespace
}  // namespace xtimer::ckpt

// The checkpoint core against hostile folders: a FIFO or a device where a rank file, `latest` or
// a segment should be (refused at once, never waited on), a rank file copied into another step's
// folder or under another rank's name (refused, never loaded as that step), `latest` naming
// another world size, and temp files a killed writer left behind (removed by the next write).
// Before the common file rule (common/regular_file.h) the FIFO tests blocked in open(2) until the
// test's timeout.
// ForeignSegment: files in the shared-memory folder that another user planted under our
// predictable names (chown'ed to `nobody`, mode 0666, or a symbolic link; the tests run as root,
// and this host does not set fs.protected_regular): never read, written or followed. Before
// OpenShmFile (ckpt/segment.h) every one of them was used as is.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpointer.h"
#include "ckpt/image.h"
#include "ckpt/persist.h"
#include "ckpt/saver.h"
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

// --- Segments another user planted

constexpr uid_t kNobody = 65534;

std::string CtlOf(const TempDirs& dirs, int rank) {
  return dirs.shm() + "/" + Segment::BaseName(dirs.ckpt(), rank) + ".ctl";
}

std::string SlotOf(const TempDirs& dirs, int rank, int slot) {
  return dirs.shm() + "/" + Segment::BaseName(dirs.ckpt(), rank) + ".slot" + std::to_string(slot);
}

// In a child process that then dies without closing (as a crashed training process would):
// the segment of (dirs.ckpt(), rank) in `shm` holding step `step` in memory, persist on failure on.
void MakeDeadSegment(const std::string& shm, const std::string& ckpt, int rank, int64_t step) {
  pid_t pid = fork();
  if (pid == 0) {
    std::unique_ptr<Segment> seg;
    if (!Segment::Create(shm, ckpt, rank, &seg).ok() || !seg->Claim(3, true).ok()) _exit(1);
    FakeState s(step, {4096});
    SaveResult r;
    std::string why;
    SaveArgs args = s.Args(step);
    args.world_size = 2;  // ranks 0 and 1
    bool ok = seg->Save(args, &r, &why).ok() && r == SaveResult::kSaved;
    seg->JoinPrefault();
    _exit(ok ? 0 : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// The three files of a segment as another user would leave them.
void GiveAway(const TempDirs& dirs, int rank, uid_t uid, mode_t mode) {
  for (const std::string& p : {CtlOf(dirs, rank), SlotOf(dirs, rank, 0), SlotOf(dirs, rank, 1)}) {
    ASSERT_EQ(chown(p.c_str(), uid, uid), 0) << p << ": " << strerror(errno);
    ASSERT_EQ(chmod(p.c_str(), mode), 0) << p;
  }
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

#define SKIP_UNLESS_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another user"

CheckpointerOptions Options(const TempDirs& dirs, int rank) {
  CheckpointerOptions o;
  o.ckpt_dir = dirs.ckpt();
  o.shm_dir = dirs.shm();
  o.rank = rank;
  return o;
}

TEST(ForeignSegment, ACreatedSegmentIsOursAndPrivateWhateverTheUmask) {
  TempDirs dirs("private");
  mode_t old = umask(0);
  std::unique_ptr<RankCheckpointer> c;
  ASSERT_TRUE(RankCheckpointer::Create(Options(dirs, 0), &c).ok());
  FakeState s(2, {4096});
  bool saved = false;
  std::string why;
  Status st = c->Save(s.Args(2), &saved, &why);
  umask(old);
  ASSERT_TRUE(st.ok()) << st.message();
  c->segment()->JoinPrefault();
  for (const std::string& p : {CtlOf(dirs, 0), SlotOf(dirs, 0, 0), SlotOf(dirs, 0, 1)}) {
    struct stat sb;
    ASSERT_EQ(lstat(p.c_str(), &sb), 0) << p;
    EXPECT_TRUE(S_ISREG(sb.st_mode)) << p;
    EXPECT_EQ(sb.st_mode & 07777, 0600u) << p;
    EXPECT_EQ(sb.st_uid, geteuid()) << p;
  }
  c->Close();
}

// The create path: a restarted worker (or a new job) finds its own segment's name taken.
TEST(ForeignSegment, APlantedControlFileIsNeitherLoadedNorWritten) {
  SKIP_UNLESS_ROOT();
  struct Case {
    uid_t uid;
    mode_t mode;
    const char* says;
  };
  for (const Case& k : {Case{kNobody, 0666, "belongs to uid 65534"}, Case{kNobody, 0600, "belongs to uid 65534"},
                        Case{geteuid(), 0666, "is writable by other users (mode 0666)"}}) {
    SCOPED_TRACE(k.says);
    TempDirs dirs("planted");
    MakeDeadSegment(dirs.shm(), dirs.ckpt(), 0, 7);  // what the other user wrote: step 7
    GiveAway(dirs, 0, k.uid, k.mode);
    const std::string before = Contents(CtlOf(dirs, 0));

    std::unique_ptr<RankCheckpointer> c;
    Status st = RankCheckpointer::Create(Options(dirs, 0), &c);
    ASSERT_TRUE(st.ok()) << st.message();  // a load must still be able to read the disk
    ReadLease lease;
    st = c->LeaseMemory(&lease);
    EXPECT_EQ(st.code(), Status::Code::kUntrusted) << "the planted step 7 was offered to the load";
    EXPECT_FALSE(lease.held());
    EXPECT_TRUE(Has(st.message(), CtlOf(dirs, 0) + " " + k.says)) << st.message();
    EXPECT_TRUE(Has(st.message(), "XTIMER_CKPT_SHM_DIR")) << st.message();
    EXPECT_EQ(c->PersistedStep(), -1);

    // A save neither writes into it nor fails silently.
    FakeState s(8, {4096});
    bool saved = true;
    std::string why;
    st = c->Save(s.Args(8), &saved, &why);
    EXPECT_EQ(st.code(), Status::Code::kUntrusted) << st.message();
    EXPECT_FALSE(saved);
    EXPECT_TRUE(Has(st.message(), "cannot save rank 0 to shared memory")) << st.message();
    EXPECT_EQ(Contents(CtlOf(dirs, 0)), before) << "the planted control file was written to";
    c->Close();

    std::unique_ptr<Segment> seg;
    EXPECT_EQ(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).code(), Status::Code::kUntrusted);
    EXPECT_EQ(Segment::Open(CtlOf(dirs, 0), false, &seg).code(), Status::Code::kUntrusted);
  }
}

// The open path: a load lists every rank's control file of its folder (fsdp.py, deepspeed.py)
// and opens another rank's; the saver and `xtimer_ckpt inspect` open what they find.
TEST(ForeignSegment, AnotherRanksPlantedControlFileIsSkipped) {
  SKIP_UNLESS_ROOT();
  TempDirs dirs("planted-rank1");
  MakeDeadSegment(dirs.shm(), dirs.ckpt(), 0, 5);  // ours
  MakeDeadSegment(dirs.shm(), dirs.ckpt(), 1, 9);  // planted
  GiveAway(dirs, 1, kNobody, 0666);

  std::unique_ptr<RankCheckpointer> other;  // how a load opens another rank's segment
  ASSERT_TRUE(RankCheckpointer::Create(Options(dirs, 1), &other).ok());
  ReadLease lease;
  Status st = other->LeaseMemory(&lease);
  EXPECT_EQ(st.code(), Status::Code::kUntrusted) << "rank 1's planted step 9 was offered to the load";
  EXPECT_TRUE(Has(st.message(), CtlOf(dirs, 1) + " belongs to uid 65534")) << st.message();

  std::unique_ptr<RankCheckpointer> mine;  // its own is still read
  ASSERT_TRUE(RankCheckpointer::Create(Options(dirs, 0), &mine).ok());
  ASSERT_TRUE(mine->LeaseMemory(&lease).ok());
  EXPECT_EQ(lease.index().info.step, 5);
  lease.Release();

  std::unique_ptr<Segment> seg;
  st = Segment::Open(CtlOf(dirs, 1), /*writable=*/false, &seg);
  EXPECT_EQ(st.code(), Status::Code::kUntrusted) << st.message();
}

TEST(ForeignSegment, ASymbolicLinkIsNeverFollowed) {
  TempDirs dirs("link");
  // A dangling link: creating through it would make a file wherever it points, as this user.
  std::string target = dirs.ckpt() + "-target";
  ASSERT_EQ(symlink(target.c_str(), CtlOf(dirs, 0).c_str()), 0);
  std::unique_ptr<RankCheckpointer> c;
  ASSERT_TRUE(RankCheckpointer::Create(Options(dirs, 0), &c).ok());
  FakeState s(3, {4096});
  bool saved = true;
  std::string why;
  Status st = c->Save(s.Args(3), &saved, &why);
  EXPECT_EQ(st.code(), Status::Code::kUntrusted) << st.message();
  EXPECT_TRUE(Has(st.message(), CtlOf(dirs, 0) + " is a symbolic link")) << st.message();
  struct stat sb;
  EXPECT_NE(lstat(target.c_str(), &sb), 0) << "a file was created through the link";
  c.reset();
  ASSERT_EQ(unlink(CtlOf(dirs, 0).c_str()), 0);

  // Links to a segment elsewhere that holds a snapshot (someone else's files, ours to read).
  TempDirs elsewhere("link");
  MakeDeadSegment(elsewhere.shm(), dirs.ckpt(), 0, 11);
  for (const std::string& f : {std::string(".ctl"), std::string(".slot0"), std::string(".slot1")}) {
    std::string name = "/" + Segment::BaseName(dirs.ckpt(), 0) + f;
    ASSERT_EQ(symlink((elsewhere.shm() + name).c_str(), (dirs.shm() + name).c_str()), 0);
  }
  ASSERT_TRUE(RankCheckpointer::Create(Options(dirs, 0), &c).ok());
  ReadLease lease;
  st = c->LeaseMemory(&lease);
  EXPECT_EQ(st.code(), Status::Code::kUntrusted) << "step 11 was read through the link";
  std::unique_ptr<Segment> seg;
  EXPECT_EQ(Segment::Open(CtlOf(dirs, 0), false, &seg).code(), Status::Code::kUntrusted);
}

TEST(ForeignSegment, APlantedSlotFileIsNotRead) {
  SKIP_UNLESS_ROOT();
  TempDirs dirs("slot");
  MakeDeadSegment(dirs.shm(), dirs.ckpt(), 0, 4);
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Open(CtlOf(dirs, 0), false, &seg).ok());
  int cur = seg->CurrentSlot();
  ASSERT_GE(cur, 0);
  seg.reset();
  ASSERT_EQ(chown(SlotOf(dirs, 0, cur).c_str(), kNobody, kNobody), 0);
  ASSERT_TRUE(Segment::Open(CtlOf(dirs, 0), false, &seg).ok());
  ReadLease lease;
  Status st = seg->AcquireCurrent(Holder::kLoad, &lease);
  EXPECT_EQ(st.code(), Status::Code::kUntrusted) << "a slot another user owns was read";
  EXPECT_TRUE(Has(st.message(), SlotOf(dirs, 0, cur) + " belongs to uid 65534")) << st.message();
}

// A planted segment whose "owner" died asks for persist on failure, into a folder it names: the
// saver would write it there as this user.
TEST(ForeignSegment, TheSaverNamesAPlantedSegmentOnceAndNeverWritesIt) {
  SKIP_UNLESS_ROOT();
  TempDirs dirs("saver-planted");
  MakeDeadSegment(dirs.shm(), dirs.ckpt(), 0, 6);
  GiveAway(dirs, 0, kNobody, 0666);
  Saver saver({dirs.shm(), -1, 10, false});
  std::string why;
  ASSERT_TRUE(saver.AcquireNodeLock(&why)) << why;
  ::testing::internal::CaptureStderr();
  saver.PollOnce();
  saver.PollOnce();
  std::string log = ::testing::internal::GetCapturedStderr();
  struct stat sb;
  EXPECT_NE(stat(RankFile(dirs.ckpt(), 6, 0).c_str(), &sb), 0) << "the saver wrote the planted snapshot";
  size_t first = log.find(CtlOf(dirs, 0) + " belongs to uid 65534");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find(CtlOf(dirs, 0), first + 1), std::string::npos) << "named more than once: " << log;
  EXPECT_EQ(saver.RemoveFinishedSegments(false), 0);
  EXPECT_EQ(stat(CtlOf(dirs, 0).c_str(), &sb), 0);
}

// The saver's lock file: another user's would decide whether our saver may run.
TEST(ForeignSegment, APlantedSaverLockIsNotTakenAndDiskSavesStillHappen) {
  SKIP_UNLESS_ROOT();
  TempDirs dirs("lock");
  std::string lock = SaverLockPath(dirs.shm());
  { std::ofstream(lock) << "1\n"; }
  ASSERT_EQ(chown(lock.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(chmod(lock.c_str(), 0666), 0);
  Saver saver({dirs.shm(), -1, 10, false});
  std::string why;
  bool held = true;
  EXPECT_FALSE(saver.AcquireNodeLock(&why, &held)) << "took another user's lock file";
  EXPECT_FALSE(held);
  EXPECT_TRUE(Has(why, lock + " belongs to uid 65534")) << why;
  Status st = EnsureSaver("/bin/true", dirs.shm(), 1);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "written by the training process")) << st.message();

  CheckpointerOptions o = Options(dirs, 0);
  o.saver_binary = "/bin/true";  // would "start" and never write anything
  std::unique_ptr<RankCheckpointer> c;
  ASSERT_TRUE(RankCheckpointer::Create(o, &c).ok());
  FakeState s(12, {4096});
  bool saved = false;
  ASSERT_TRUE(c->Save(s.Args(12, /*disk=*/true), &saved, &why).ok());
  EXPECT_TRUE(c->inline_persist());
  EXPECT_TRUE(c->Wait(30, nullptr).ok());
  XtcFile f;
  EXPECT_TRUE(XtcFile::Open(RankFile(dirs.ckpt(), 12, 0), &f).ok());
  c->Close();
}

}  // namespace
}  // namespace xtimer::ckpt

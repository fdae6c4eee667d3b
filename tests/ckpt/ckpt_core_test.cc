// Unit tests of the checkpoint core: checksum, image format, slots, locks, room check, disk
// files, tracker, keep, the saver's scan.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>

#include "ckpt/checkpointer.h"
#include "ckpt/checksum.h"
#include "ckpt/copier.h"
#include "ckpt/image.h"
#include "ckpt/persist.h"
#include "ckpt/proc.h"
#include "ckpt/saver.h"
#include "ckpt/segment.h"
#include "tests/ckpt/ckpt_test_util.h"

namespace xtimer::ckpt {
namespace {

using testing::FakeState;
using testing::TempDirs;

// The published definition, word by word.
Checksum Reference(const uint8_t* p, size_t n) {
  uint64_t a = 0, b = 0;
  for (size_t i = 0, w = 1; i < n; i += 8, ++w) {
    uint64_t word = 0;
    std::memcpy(&word, p + i, std::min<size_t>(8, n - i));
    a += word;
    b += w * word;
  }
  return {a, b};
}

std::vector<uint8_t> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Checksum, MatchesTheDefinitionForEveryLengthAndAlignment) {
  auto data = Random(700, 1);
  for (size_t off = 0; off < 9; ++off) {
    for (size_t n = 0; n < 600; n += (n < 140 ? 1 : 37))
      ASSERT_EQ(ChecksumOf(data.data() + off, n), Reference(data.data() + off, n)) << "off " << off << " n " << n;
  }
}

TEST(Checksum, PiecesCombine) {
  auto data = Random(1 << 16, 2);
  Checksum whole = ChecksumOf(data.data(), data.size() - 3);
  for (size_t cut : {0ul, 8ul, 64ul, 4096ul, 8000ul}) {
    Fletcher f = ChecksumBytes(data.data(), cut);
    f.Append(ChecksumBytes(data.data() + cut, data.size() - 3 - cut));
    EXPECT_EQ(f.Finish(), whole) << cut;
  }
}

TEST(Checksum, EveryFlippedByteAndSwappedWordIsSeen) {
  auto data = Random(4096, 3);
  Checksum good = ChecksumOf(data.data(), data.size());
  for (size_t i = 0; i < data.size(); i += 13) {
    data[i] ^= 0x80;
    EXPECT_NE(ChecksumOf(data.data(), data.size()), good) << i;
    data[i] ^= 0x80;
  }
  std::swap_ranges(data.begin(), data.begin() + 8, data.begin() + 64);
  EXPECT_NE(ChecksumOf(data.data(), data.size()), good);
}

TEST(Checksum, CopyCopiesAndSums) {
  auto src = Random(100000, 4);
  for (bool stream : {false, true}) {
    for (size_t off : {0ul, 3ul, 16ul}) {
      std::vector<uint8_t> dst(src.size() + 32, 0);
      Fletcher f = CopyWithChecksum(dst.data() + off, src.data(), src.size() - 5, stream);
      EXPECT_EQ(0, std::memcmp(dst.data() + off, src.data(), src.size() - 5));
      EXPECT_EQ(f.Finish(), Reference(src.data(), src.size() - 5));
    }
  }
  std::vector<uint8_t> big = Random(3 * kCopyPiece + 77, 5), out(big.size());
  EXPECT_EQ(ParallelCopy(out.data(), big.data(), big.size(), 4, true).Finish(), Reference(big.data(), big.size()));
  EXPECT_EQ(big, out);
}

TEST(Checksum, HexRoundTrip) {
  Checksum c{0x0123456789abcdefull, 0xfedcba9876543210ull}, d;
  ASSERT_TRUE(Checksum::FromHex(c.ToHex(), &d));
  EXPECT_EQ(c, d);
  EXPECT_FALSE(Checksum::FromHex("zz", &d));
}

TEST(Copier, GathersAnyStrides) {
  // A 3x4 float32 matrix, transposed (strides 1, 4), and one with a zero stride (expand).
  std::vector<float> m(12);
  for (int i = 0; i < 12; ++i) m[i] = static_cast<float>(i);
  Source t{m.data(), 48, 4, {4, 3}, {1, 4}, -1};
  EXPECT_FALSE(t.Contiguous());
  std::vector<float> out(12);
  GatherStrided(out.data(), t);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out[r * 3 + c], m[c * 4 + r]);
  Source e{m.data(), 24, 4, {2, 3}, {0, 1}, -1};
  std::vector<float> out2(6);
  GatherStrided(out2.data(), e);
  EXPECT_EQ(out2, (std::vector<float>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE((Source{m.data(), 48, 4, {3, 4}, {4, 1}, -1}).Contiguous());
  EXPECT_TRUE((Source{m.data(), 16, 4, {1, 4}, {99, 1}, -1}).Contiguous());
}

TEST(Copier, AutomaticThreadsAreThePool) {
  // threads = 0 (the options' "automatic") runs on the pool's threads, not on the caller alone:
  // two items that each wait for the other to start finish only on two threads.
  CopyPool& pool = CopyPool::Get(2);
  ASSERT_GE(pool.size(), 2);
  std::atomic<int> started{0};
  std::atomic<bool> met[2] = {false, false};
  pool.ParallelFor(2, 0, [&](size_t k) {
    started.fetch_add(1);
    for (int i = 0; i < 10000 && started.load() < 2; ++i) usleep(1000);  // 10 s at most: no hang
    met[k] = started.load() == 2;
  });
  EXPECT_TRUE(met[0] && met[1]) << "the two items ran one after the other";
}

TEST(Copier, PopulatingPastAFilesEndIsAnErrorNotASignal) {
  TempDirs dirs("populate");
  const long page = sysconf(_SC_PAGESIZE);
  std::string path = dirs.shm() + "/populate";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 * page), 0);
  void* p = mmap(nullptr, static_cast<size_t>(8 * page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* base = static_cast<unsigned char*>(p);
  EXPECT_EQ(PopulateParallel(base, static_cast<uint64_t>(4 * page), 0), 0);
  base[4 * page - 1] = 1;  // populated and writable
  // The last four pages lie past the end: a write there would raise SIGBUS.
  EXPECT_EQ(PopulateParallel(base, static_cast<uint64_t>(8 * page), 0), EFAULT);
  munmap(p, static_cast<size_t>(8 * page));
  close(fd);
}

// An image built in memory, for the format tests.
std::vector<uint8_t> MakeImage(const std::vector<std::vector<uint8_t>>& data, int64_t step, Index* idx_out) {
  std::vector<uint64_t> sizes, offsets;
  for (auto& d : data) sizes.push_back(d.size());
  uint64_t index_off = PlanData(sizes, &offsets);
  std::vector<Entry> entries;
  for (size_t i = 0; i < data.size(); ++i) {
    Entry e;
    e.name = "w" + std::to_string(i);
    e.dtype = "uint8";
    e.device = "cpu";
    e.shape = {static_cast<int64_t>(data[i].size())};
    e.offset = offsets[i];
    e.nbytes = data[i].size();
    e.sum = ChecksumOf(data[i].data(), data[i].size());
    entries.push_back(e);
  }
  std::string index = BuildIndex({step, 0, 1, "{\"a\":1}"}, entries);
  std::vector<uint8_t> img(index_off + index.size(), 0);
  for (size_t i = 0; i < data.size(); ++i)
    if (!data[i].empty()) std::memcpy(img.data() + offsets[i], data[i].data(), data[i].size());
  std::memcpy(img.data() + index_off, index.data(), index.size());
  WriteHeader(img.data(), step, index_off, index);
  if (idx_out) {
    EXPECT_TRUE(ParseImage(img.data(), img.size(), "img", idx_out).ok());
  }
  return img;
}

TEST(Image, RoundTripAndEveryKindOfDamageIsNamed) {
  std::vector<std::vector<uint8_t>> data = {Random(1000, 6), Random(5, 7), {}, Random(70000, 8)};
  Index idx;
  auto img = MakeImage(data, 42, &idx);
  ASSERT_EQ(idx.entries.size(), 4u);
  EXPECT_EQ(idx.info.step, 42);
  EXPECT_NE(idx.index_json.find("\"tree\":{\"a\":1}"), std::string::npos);
  for (auto& e : idx.entries) EXPECT_EQ(e.offset % kEntryAlign, 0u);
  EXPECT_TRUE(VerifyData(img.data(), idx, "img").ok());

  auto damaged = img;
  damaged[idx.entries[3].offset + 12345] ^= 1;
  Status st = VerifyData(damaged.data(), idx, "img");
  EXPECT_EQ(st.code(), Status::Code::kCorrupt);
  EXPECT_NE(st.message().find("entry w3"), std::string::npos) << st.message();

  damaged = img;
  damaged[img.size() - 10] ^= 1;  // in the index
  Index bad;
  st = ParseImage(damaged.data(), damaged.size(), "img", &bad);
  EXPECT_NE(st.message().find("index checksum"), std::string::npos) << st.message();

  for (size_t at : {0ul, 17ul, 40ul, 70ul}) {  // in the header
    damaged = img;
    damaged[at] ^= 4;
    EXPECT_FALSE(ParseImage(damaged.data(), damaged.size(), "img", &bad).ok()) << at;
  }
  EXPECT_FALSE(ParseImage(img.data(), img.size() - 1, "img", &bad).ok());  // truncated
  EXPECT_FALSE(ParseImage(img.data(), 40, "img", &bad).ok());
}

TEST(Segment, SavesFlipSlotsAndLoadBitIdentical) {
  TempDirs dirs("flip");
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 3, &seg).ok());
  ASSERT_TRUE(seg->Claim(3, true).ok());
  EXPECT_EQ(seg->CurrentSlot(), -1);
  for (int64_t step = 1; step <= 4; ++step) {
    FakeState state(step, {100, 1 << 20, 0, 3});
    SaveResult r;
    std::string why;
    SaveArgs args = state.Args(step);
    args.world_size = 4;
    ASSERT_TRUE(seg->Save(args, &r, &why).ok());
    ASSERT_EQ(r, SaveResult::kSaved) << why;
    EXPECT_EQ(seg->CurrentSlot(), static_cast<int>((step - 1) % 2));
    ReadLease lease;
    Status st = seg->AcquireCurrent(Holder::kLoad, &lease);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(lease.index().info.step, step);
    EXPECT_EQ(lease.index().info.rank, 3);
    ASSERT_TRUE(VerifyData(lease.image(), lease.index(), lease.what()).ok());
    for (size_t i = 0; i < state.bufs.size(); ++i) {
      if (state.bufs[i].empty()) continue;
      EXPECT_EQ(
          0, std::memcmp(lease.image() + lease.index().entries[i].offset, state.bufs[i].data(), state.bufs[i].size()));
    }
    if (step > 1) {
      EXPECT_EQ(seg->SlotStep(1 - seg->CurrentSlot()), step - 1);  // the previous one stays
    }
  }
  // Another process' view (the saver's): same content through Open.
  std::unique_ptr<Segment> other;
  ASSERT_TRUE(Segment::Open(seg->ctl_path(), false, &other).ok());
  EXPECT_EQ(other->CurrentSlot(), seg->CurrentSlot());
  EXPECT_EQ(other->ckpt_dir(), dirs.ckpt());
}

// The first save reserves and touches its own slot; the other one's reservation and first touch
// (allocation, zeroing, page tables: about a copy's time) happen behind it, not in the second save.
TEST(Segment, TheOtherSlotIsTouchedBehindTheFirstSave) {
  TempDirs dirs("prefault");
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok());
  ASSERT_TRUE(seg->Claim(3, true).ok());
  const uint64_t bytes = 8ull << 20;
  const long pages = static_cast<long>(bytes / static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  auto faults = [] {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt + r.ru_majflt;
  };
  for (int64_t step = 1; step <= 3; ++step) {
    FakeState state(step, {bytes / 2, bytes / 2});
    seg->JoinPrefault();
    long before = faults();
    SaveResult r;
    std::string why;
    ASSERT_TRUE(seg->Save(state.Args(step), &r, &why).ok());
    long during = faults() - before;
    ASSERT_EQ(r, SaveResult::kSaved) << why;
    // The first save touches its own slot; later ones find their slot's pages in place (a few
    // faults remain for the copy threads' stacks and, under ASan, shadow memory).
    if (step == 1) EXPECT_GT(during, pages / 2);
    else EXPECT_LT(during, pages / 4) << "save " << step << " took " << during << " page faults";
    ReadLease lease;
    ASSERT_TRUE(seg->AcquireCurrent(Holder::kLoad, &lease).ok());
    ASSERT_TRUE(VerifyData(lease.image(), lease.index(), lease.what()).ok());
    for (size_t i = 0; i < state.bufs.size(); ++i)
      EXPECT_EQ(0, std::memcmp(lease.image() + lease.index().entries[i].offset, state.bufs[i].data(), bytes / 2));
    if (step == 1) {  // the other slot is reserved behind the save, not in it
      seg->JoinPrefault();
      EXPECT_GE(A(seg->ctl()->slot[1].capacity).load(), bytes);
    }
  }
}

TEST(Segment, ASecondLiveOwnerIsRefused) {
  TempDirs dirs("owner");
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok());
  // Pretend our parent owns it: alive, not us.
  A(seg->ctl()->owner).store(TagOf(getppid()));
  A(seg->ctl()->owner_state).store(kOwnerRunning);
  Status st = seg->Claim(3, true);
  EXPECT_EQ(st.code(), Status::Code::kBusy);
  EXPECT_NE(st.message().find("in use by process"), std::string::npos) << st.message();
  A(seg->ctl()->owner_state).store(kOwnerClosed);
  EXPECT_TRUE(seg->Claim(3, true).ok());
}

// A tag of a process that existed and is gone.
uint64_t DeadTag() {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    char c;
    if (read(fds[0], &c, 1) < 0) {
    }
    _exit(0);
  }
  uint64_t tag = TagOf(pid);
  EXPECT_TRUE(TagAlive(tag));
  close(fds[1]);
  waitpid(pid, nullptr, 0);
  EXPECT_FALSE(TagAlive(tag));
  return tag;
}

TEST(Segment, BusySlotsSkipMemorySavesAndDeadHoldersAreTakenOver) {
  TempDirs dirs("busy");
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok());
  FakeState s1(1, {4096}), s2(2, {4096}), s3(3, {4096});
  SaveResult r;
  std::string why;
  ASSERT_TRUE(seg->Save(s1.Args(1), &r, &why).ok());
  ASSERT_TRUE(seg->Save(s2.Args(2), &r, &why).ok());
  int target = 1 - seg->CurrentSlot();  // holds step 1

  // A live reader (the saver writing it) on the target: the memory save is skipped.
  ReadLease lease;
  ASSERT_TRUE(seg->AcquireSlot(target, Holder::kPersist, &lease).ok());
  ASSERT_TRUE(seg->Save(s3.Args(3), &r, &why).ok());
  EXPECT_EQ(r, SaveResult::kSkipped);
  EXPECT_NE(why.find("the saver"), std::string::npos) << why;
  EXPECT_EQ(seg->SlotStep(seg->CurrentSlot()), 2);
  lease.Release();

  // A slot that holds a step wanted on disk is not overwritten by a memory save.
  A(seg->ctl()->slot[target].disk).store(kDiskWanted);
  ASSERT_TRUE(seg->Save(s3.Args(3), &r, &why).ok());
  EXPECT_EQ(r, SaveResult::kSkipped);
  EXPECT_NE(why.find("not on disk yet"), std::string::npos) << why;
  A(seg->ctl()->slot[target].disk).store(kDiskDone);

  // Locks of dead processes (a writer killed mid-save, a reader killed mid-read) are taken over.
  uint64_t dead = DeadTag();
  A(seg->ctl()->slot[target].writer).store(WithKind(dead, 1));
  A(seg->ctl()->slot[target].readers[2]).store(WithKind(dead, 2));
  ASSERT_TRUE(seg->Save(s3.Args(3), &r, &why).ok());
  EXPECT_EQ(r, SaveResult::kSaved) << why;
  EXPECT_EQ(seg->SlotStep(seg->CurrentSlot()), 3);
  EXPECT_EQ(A(seg->ctl()->slot[target].readers[2]).load(), 0u);
}

TEST(Segment, RoomCheckFailsBeforeAnyCopyWithBytesNeededAndAvailable) {
  TempDirs dirs("room");
  std::unique_ptr<Segment> seg;
  ASSERT_TRUE(Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok());
  SaveArgs a;
  a.step = 1;
  SaveEntry e;
  e.name = "huge";
  e.dtype = "uint8";
  e.device = "cpu";
  e.shape = {1ll << 50};
  e.src.ptr = reinterpret_cast<const void*>(16);  // never read: the check comes first
  e.src.nbytes = 1ull << 50;
  a.entries.push_back(e);
  SaveResult r;
  std::string why;
  Status st = seg->Save(a, &r, &why);
  EXPECT_EQ(st.code(), Status::Code::kNoSpace);
  EXPECT_NE(st.message().find("available"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("XTIMER_CKPT_SHM_DIR"), std::string::npos) << st.message();
  EXPECT_EQ(seg->CurrentSlot(), -1);
}

TEST(Disk, PageAlignedAndUnalignedImagesAreWrittenTheSame) {
  // A page-aligned image (a slot's mapping) goes around the page cache in whole pages, its tail
  // through it; an unaligned one all through it. Several write chunks and a tail of 17 bytes.
  TempDirs dirs("direct");
  std::vector<std::vector<uint8_t>> data = {Random(37 << 20, 11), Random(17, 12)};
  Index idx;
  auto img = MakeImage(data, 9, &idx);
  ASSERT_NE(img.size() % 4096, 0u);
  void* mem = nullptr;
  ASSERT_EQ(posix_memalign(&mem, 4096, img.size() + 4096), 0);
  auto* aligned = static_cast<unsigned char*>(mem);
  for (unsigned char* base : {aligned, aligned + 8}) {
    std::memcpy(base, img.data(), img.size());
    std::string path = RankFile(dirs.ckpt(), base == aligned ? 9 : 10, 0);
    ASSERT_TRUE(WriteImageFile(base, idx, path).ok());
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(back == img) << path << ": " << back.size() << " bytes, " << img.size() << " written";
  }
  free(mem);
}

TEST(Disk, WriteReadVerifyAndCorruptionIsNamed) {
  TempDirs dirs("disk");
  std::vector<std::vector<uint8_t>> data = {Random(3 << 20, 9), Random(17, 10)};
  Index idx;
  auto img = MakeImage(data, 7, &idx);
  std::string path = RankFile(dirs.ckpt(), 7, 0);
  ASSERT_TRUE(WriteImageFile(img.data(), idx, path).ok());
  XtcFile f;
  ASSERT_TRUE(XtcFile::Open(path, &f).ok());
  std::vector<std::vector<uint8_t>> out = {std::vector<uint8_t>(data[0].size()), std::vector<uint8_t>(17)};
  ASSERT_TRUE(f.ReadInto({out[0].data(), out[1].data()}).ok());
  EXPECT_EQ(out, data);
  EXPECT_TRUE(f.Verify().ok());

  // One flipped byte in the data: refused, naming the file and the entry.
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(idx.entries[0].offset + 1000000));
    char c;
    io.seekg(static_cast<std::streamoff>(idx.entries[0].offset + 1000000));
    io.get(c);
    io.seekp(static_cast<std::streamoff>(idx.entries[0].offset + 1000000));
    io.put(static_cast<char>(c ^ 0x10));
  }
  ASSERT_TRUE(XtcFile::Open(path, &f).ok());
  Status st = f.ReadInto({out[0].data(), out[1].data()});
  EXPECT_EQ(st.code(), Status::Code::kCorrupt);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("w0"), std::string::npos) << st.message();

  // A corrupt snapshot in memory is never written.
  auto bad = img;
  bad[idx.entries[1].offset] ^= 1;
  st = WriteImageFile(bad.data(), idx, RankFile(dirs.ckpt(), 8, 0));
  EXPECT_EQ(st.code(), Status::Code::kCorrupt);
  struct stat sb;
  EXPECT_NE(stat(RankFile(dirs.ckpt(), 8, 0).c_str(), &sb), 0);
}

TEST(Disk, LatestMovesOnlyWhenEveryRankIsThereAndKeepDeletesOldSteps) {
  TempDirs dirs("latest");
  auto write = [&](int64_t step, int rank, int world) {
    ASSERT_EQ(testing::WriteOneTensorRankFile(dirs.ckpt(), step, rank, world,
                                              Random(64, static_cast<uint64_t>(step * 10 + rank))),
              "");
    bool complete = false;
    ASSERT_TRUE(FinishStep(dirs.ckpt(), step, world, 2, &complete).ok());
  };
  write(10, 0, 2);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), -1);  // rank 1 missing
  write(10, 1, 2);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), 10);
  write(20, 1, 2);
  write(20, 0, 2);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), 20);
  write(5, 0, 2);  // an old step finishing late never moves latest back
  write(5, 1, 2);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), 20);
  write(30, 0, 2);  // incomplete newest step: kept
  write(40, 0, 2);
  write(40, 1, 2);
  std::vector<DiskStep> steps;
  ASSERT_TRUE(ScanDisk(dirs.ckpt(), &steps).ok());
  std::vector<int64_t> have;
  for (auto& s : steps) have.push_back(s.step);
  // keep = 2 complete steps (40, 20); 30 is newer than 20 and kept; 10 and 5 deleted.
  EXPECT_EQ(have, (std::vector<int64_t>{40, 30, 20}));
  EXPECT_TRUE(steps[0].complete);
  EXPECT_FALSE(steps[1].complete);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), 40);
}

TEST(Saver, WritesDiskSavesAndPersistsForADeadOwner) {
  TempDirs dirs("saver");
  // A child process saves step 1 to disk and step 2 to memory, then dies without closing.
  pid_t pid = fork();
  if (pid == 0) {
    std::unique_ptr<Segment> seg;
    if (!Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok() || !seg->Claim(3, true).ok()) _exit(1);
    FakeState s1(1, {1000, 5000}), s2(2, {1000, 5000});
    SaveResult r;
    std::string why;
    if (!seg->Save(s1.Args(1, /*disk=*/true), &r, &why).ok()) _exit(2);
    if (!seg->Save(s2.Args(2), &r, &why).ok()) _exit(3);
    seg->JoinPrefault();  // the first save's thread: ended, or TSan counts it leaked
    _exit(0);             // no CloseClean: a failure
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  Saver saver({dirs.shm(), -1, 10, false});
  std::string why;
  ASSERT_TRUE(saver.AcquireNodeLock(&why)) << why;
  EXPECT_TRUE(SaverRunning(dirs.shm()));
  EXPECT_FALSE(saver.PollOnce());  // did everything, nothing alive
  for (int64_t step : {1, 2}) {
    XtcFile f;
    ASSERT_TRUE(XtcFile::Open(RankFile(dirs.ckpt(), step, 0), &f).ok()) << step;
    EXPECT_TRUE(f.Verify().ok());
  }
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), 2);
  // Everything is on disk: the segment may go.
  EXPECT_EQ(saver.RemoveFinishedSegments(false), 1);
  struct stat sb;
  EXPECT_NE(stat((dirs.shm() + "/" + Segment::BaseName(dirs.ckpt(), 0) + ".ctl").c_str(), &sb), 0);
  saver.ReleaseNodeLock();
  EXPECT_FALSE(SaverRunning(dirs.shm()));
}

TEST(Saver, NoPersistOnFailureWhenDisabledAndTheOnlyCopyIsKept) {
  TempDirs dirs("nopersist");
  pid_t pid = fork();
  if (pid == 0) {
    std::unique_ptr<Segment> seg;
    if (!Segment::Create(dirs.shm(), dirs.ckpt(), 0, &seg).ok() || !seg->Claim(3, false).ok()) _exit(1);
    FakeState s(5, {100});
    SaveResult r;
    std::string why;
    bool ok = seg->Save(s.Args(5), &r, &why).ok();
    seg->JoinPrefault();  // the first save's thread: ended, or TSan counts it leaked
    _exit(ok ? 0 : 2);
  }
  waitpid(pid, nullptr, 0);
  Saver saver({dirs.shm(), -1, 10, false});
  std::string why;
  ASSERT_TRUE(saver.AcquireNodeLock(&why));
  saver.PollOnce();
  struct stat sb;
  EXPECT_NE(stat(RankFile(dirs.ckpt(), 5, 0).c_str(), &sb), 0);
  EXPECT_EQ(saver.RemoveFinishedSegments(false), 0);  // the only copy of step 5
}

TEST(Checkpointer, WritesDiskSavesItselfWithoutASaverAndWaits) {
  TempDirs dirs("inline");
  CheckpointerOptions o;
  o.ckpt_dir = dirs.ckpt();
  o.shm_dir = dirs.shm();
  o.saver_binary = "";  // none
  std::unique_ptr<RankCheckpointer> c;
  ASSERT_TRUE(RankCheckpointer::Create(o, &c).ok());
  FakeState s(9, {12345});
  bool saved = false;
  std::string why;
  ASSERT_TRUE(c->Save(s.Args(9, true), &saved, &why).ok());
  EXPECT_TRUE(saved);
  EXPECT_TRUE(c->inline_persist());
  EXPECT_TRUE(c->Wait(5, nullptr).ok());
  EXPECT_EQ(c->PersistedStep(), 9);
  EXPECT_EQ(ReadLatest(dirs.ckpt(), nullptr), 9);
  c->Close();
  EXPECT_EQ(A(c->segment()->ctl()->owner_state).load(), kOwnerClosed);
}

TEST(Checkpointer, StartsANewSegmentWhenTheSaverRemovedItsFiles) {
  TempDirs dirs("removed");
  CheckpointerOptions o;
  o.ckpt_dir = dirs.ckpt();
  o.shm_dir = dirs.shm();
  std::unique_ptr<RankCheckpointer> c;
  ASSERT_TRUE(RankCheckpointer::Create(o, &c).ok());
  std::string ctl = c->segment()->ctl_path();
  ASSERT_TRUE(c->segment()->Remove().ok());  // as a saver does for a segment nobody owns
  EXPECT_TRUE(c->segment()->Unlinked());
  FakeState s(4, {100});
  bool saved = false;
  std::string why;
  ASSERT_TRUE(c->Save(s.Args(4), &saved, &why).ok());
  EXPECT_TRUE(saved);
  EXPECT_FALSE(c->segment()->Unlinked());
  std::unique_ptr<Segment> seen;  // what a saver or a restarted process finds
  ASSERT_TRUE(Segment::Open(ctl, false, &seen).ok());
  EXPECT_EQ(seen->SlotStep(seen->CurrentSlot()), 4);
}

}  // namespace
}  // namespace xtimer::ckpt

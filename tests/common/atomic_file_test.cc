// WriteFileAtomically (common/atomic_file.h): whole content or streamed, the old file survives a
// failed write, no temp file is left behind, the error names the file.
#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace xtimer {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atomic_file_test." + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Files in the folder other than `keep` (a left-over temp file).
  std::vector<std::string> Others(const std::string& keep) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename() != keep) names.push_back(e.path().filename());
    return names;
  }

  fs::path dir_;
};

// Pieces of every size around the block size, so that the buffered and the pass-through paths
// of the sink both run and the bytes come out in order.
std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((seed = seed * 1103515245 + 12345) >> 24);
  return s;
}

TEST_F(AtomicFileTest, StreamedPiecesArriveInOrder) {
  std::string expected;
  std::vector<std::string> pieces;
  for (size_t n : {size_t{1}, size_t{7}, kAtomicWriteBlock - 3, size_t{5}, kAtomicWriteBlock, 3 * kAtomicWriteBlock + 1,
                   size_t{0}, size_t{100}})
    pieces.push_back(Pattern(n, static_cast<uint32_t>(n)));
  for (const auto& p : pieces) expected += p;
  expected += "42\n";
  std::string error;
  const fs::path path = dir_ / "out.bin";
  ASSERT_TRUE(WriteFileAtomically(
      path,
      [&](ByteSink& out) {
        for (const auto& p : pieces) out << p;
        out << uint64_t{42} << '\n';
      },
      &error))
      << error;
  EXPECT_EQ(Read(path), expected);
  EXPECT_TRUE(Others("out.bin").empty());
}

TEST_F(AtomicFileTest, WholeContentReplacesTheOldFile) {
  const fs::path path = dir_ / "f.txt";
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "old\n", &error)) << error;
  ASSERT_TRUE(WriteFileAtomically(path, "new content\n", &error, {.sync = false, .still_wanted = {}})) << error;
  EXPECT_EQ(Read(path), "new content\n");
  EXPECT_TRUE(Others("f.txt").empty());
}

TEST_F(AtomicFileTest, NotWantedAnyMoreKeepsTheOldFile) {
  const fs::path path = dir_ / "f.txt";
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "old\n", &error)) << error;
  ASSERT_TRUE(
      WriteFileAtomically(path, [](ByteSink& out) { out << "new\n"; }, &error, {.still_wanted = [] { return false; }}));
  EXPECT_EQ(Read(path), "old\n");
  EXPECT_TRUE(Others("f.txt").empty());
}

TEST_F(AtomicFileTest, MissingFolderIsAOneLineError) {
  std::string error;
  const std::string path = (dir_ / "no_such_folder" / "f.txt").string();
  EXPECT_FALSE(WriteFileAtomically(
      path, [](ByteSink& out) { out << "x"; }, &error));
  EXPECT_NE(error.find("cannot create " + path + ".tmp."), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

// A write that fails midway, for real: the kernel refuses to grow a file beyond RLIMIT_FSIZE
// (EFBIG once SIGXFSZ is ignored), as it refuses on a full disk (ENOSPC). Run in a child process,
// so that the limit stays there; returns 0 when the write failed as it should.
int WriteTenBlocksUnderALimitOfThree(const std::string& path, bool streamed) {
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = {3 * kAtomicWriteBlock + 100, 3 * kAtomicWriteBlock + 100};
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
  std::string err;
  size_t produced = 0;
  bool ok;
  if (streamed) {
    ok = WriteFileAtomically(
        path,
        [&](ByteSink& out) {
          for (uint32_t i = 0; i < 10; ++i, produced += kAtomicWriteBlock) out << Pattern(kAtomicWriteBlock, i);
        },
        &err);
  } else {
    ok = WriteFileAtomically(path, Pattern(10 * kAtomicWriteBlock, 1), &err);
    produced = 10 * kAtomicWriteBlock;
  }
  if (ok) return 11;
  if (produced != 10 * kAtomicWriteBlock) return 12;  // the producer ran to its end, harmlessly
  if (err.find("cannot write " + path + ".tmp.") != 0) return 13;
  if (err.find("File too large") == std::string::npos || err.find('\n') != std::string::npos) return 14;
  return 0;
}

// The old file survives whole, the temp file is gone, the error names the file in one line.
TEST_F(AtomicFileTest, WriteFailingMidwayKeepsTheOldFile) {
  const std::string path = (dir_ / "big.out").string();
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "the old, whole file\n", &error)) << error;
  for (bool streamed : {true, false}) {
    EXPECT_EXIT(std::exit(WriteTenBlocksUnderALimitOfThree(path, streamed)), ::testing::ExitedWithCode(0), "")
        << (streamed ? "streamed" : "whole");
    EXPECT_EQ(Read(path), "the old, whole file\n");
    EXPECT_EQ(Others("big.out"), std::vector<std::string>{});
  }
}

TEST(ByteSink, StringSinkKeepsEverything) {
  StringSink s;
  s << "a" << std::string("bc") << std::string_view("d") << 'e' << -12 << uint64_t{18446744073709551615ull}
    << static_cast<uint32_t>(7) << size_t{0};
  s.Flush();  // keeps the bytes: a StringSink's buffer is its output
  EXPECT_EQ(s.str(), "abcde-121844674407370955161570");
  EXPECT_FALSE(s.failed());
}

}  // namespace
}  // namespace xtimer

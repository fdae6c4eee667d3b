// The file rule (common/regular_file.h): a FIFO is refused without blocking, a device without
// being read, a link when links are refused, a file above the format's limit before any read;
// a regular file reads whole. Before the rule, the FIFO case blocked in open(2) (the test's
// timeout) and /dev/zero read until memory ran out.
#include "common/regular_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace xtimer {
namespace {

class RegularFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/xtimer-regular-file-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(RegularFile, ReadsARegularFileWhole) {
  std::string path = dir_ + "/a";
  std::ofstream(path) << "hello";
  std::string text, why;
  ASSERT_TRUE(ReadRegularFile(path, FileRule{.what = "test file", .max_bytes = 5}, &text, &why)) << why;
  EXPECT_EQ(text, "hello");
}

TEST_F(RegularFile, RefusesAFifoWithoutBlocking) {
  std::string path = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::string text, why;
  EXPECT_FALSE(ReadRegularFile(path, FileRule{.what = "stack file"}, &text, &why));
  EXPECT_EQ(why, "is a FIFO, not a regular file; only a regular file is read as a stack file");
}

TEST_F(RegularFile, RefusesADeviceAndAFolderWithoutReading) {
  std::string text, why;
  EXPECT_FALSE(ReadRegularFile("/dev/zero", FileRule{}, &text, &why));
  EXPECT_TRUE(Has(why, "is a character device, not a regular file")) << why;
  EXPECT_TRUE(text.empty());
  EXPECT_FALSE(ReadRegularFile(dir_, FileRule{}, &text, &why));
  EXPECT_TRUE(Has(why, "is a folder")) << why;
}

TEST_F(RegularFile, RefusesALinkOnlyWhenTold) {
  std::string real = dir_ + "/real", link = dir_ + "/link";
  std::ofstream(real) << "x";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  std::string text, why;
  EXPECT_TRUE(ReadRegularFile(link, FileRule{}, &text, &why)) << why;
  EXPECT_FALSE(ReadRegularFile(link, FileRule{.what = "stack file", .follow_links = false}, &text, &why));
  EXPECT_TRUE(Has(why, "is a symbolic link")) << why;
  // A link to a device is a device, whatever the link's name says.
  std::string dev = dir_ + "/zero.stacktrace";
  ASSERT_EQ(symlink("/dev/zero", dev.c_str()), 0);
  EXPECT_FALSE(ReadRegularFile(dev, FileRule{}, &text, &why));
  EXPECT_TRUE(Has(why, "character device")) << why;
}

TEST_F(RegularFile, RefusesAFileLargerThanTheFormatCanHold) {
  std::string path = dir_ + "/big";
  std::ofstream(path) << std::string(3000, 'x');
  std::string text, why;
  EXPECT_FALSE(ReadRegularFile(path, FileRule{.what = "token file", .max_bytes = 2048}, &text, &why));
  EXPECT_EQ(why, "is 2.9 KiB, more than a token file can hold (2.0 KiB); is it the right file?");
  EXPECT_TRUE(text.empty());
}

TEST_F(RegularFile, SaysWhenTheFileIsMissing) {
  std::string text, why;
  EXPECT_FALSE(ReadRegularFile(dir_ + "/none", FileRule{}, &text, &why));
  EXPECT_EQ(why, "does not exist");
}

}  // namespace
}  // namespace xtimer

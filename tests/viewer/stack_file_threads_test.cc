// Reading a stack file thread by thread (common/stacks/stack_file_threads.h, stack_threads_splitter.h)
// must give exactly what the whole-file parse gives: the same fields, the same threads in the same
// order, the same refusals with the same reasons.
#include "common/stacks/stack_file_threads.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/stacks/stack_threads_splitter.h"
#include "tests/viewer/stack_json.h"
#include "viewer/stack_folder.h"
#include "viewer/stack_merger.h"

namespace xtimer {
namespace {

using testing::HangOf4;
using testing::StackFileToJson;

class StackFileThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("xtimer_threads_test." + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // The file as read thread by thread (whole_below 0: even a small file is split), put back
  // together; "" and *error when refused.
  std::string ReadSplit(const std::string& path, std::string* error, bool* whole = nullptr) {
    StackFileThreads f;
    if (!f.Open(path, error, {.whole_below = 0})) return "";
    if (whole != nullptr) *whole = f.whole();
    StackFile out = f.header();
    if (!f.whole()) {
      EXPECT_TRUE(out.threads.empty());
      out.threads.clear();
      size_t expect = 0;
      EXPECT_TRUE(f.ForEach(
          [&](const StackThread& t, size_t index) {
            EXPECT_EQ(index, expect++);
            out.threads.push_back(t);
          },
          error));
    }
    return StackFileToJson(out);
  }

  // The same file through the whole-file reader.
  std::string ReadWhole(const std::string& path, std::string* error) {
    StackFile f;
    StackReadBuffer buffer;
    if (!ReadStackFile(path, &f, &buffer, error)) return "";
    return StackFileToJson(f);
  }

  // Both readers agree on this text: the same file, or the same refusal and reason.
  void ExpectSame(const std::string& text, bool expect_split) {
    std::string path = Write("f.stacktrace", text);
    std::string split_error, whole_error;
    bool whole = true;
    std::string split = ReadSplit(path, &split_error, &whole);
    std::string plain = ReadWhole(path, &whole_error);
    EXPECT_EQ(split, plain) << text.substr(0, 200);
    EXPECT_EQ(split_error, whole_error) << text.substr(0, 200);
    if (!plain.empty()) {
      EXPECT_EQ(!whole, expect_split) << text.substr(0, 200);
    }
  }

  std::filesystem::path dir_;
};

// A file whose strings hold every byte the splitter must not take for structure.
StackFile Tricky() {
  StackFile f = HangOf4()[2];
  f.threads[0].name = "a \"quoted\" {name} [with] \\ back\\slash, and: \"\\\"\"";
  f.threads[1].native[0].function = "ns::f<std::pair<int, char>>()::{lambda()#1}";
  f.threads[1].native[0].file = "/src/{odd}/[dir]\\\"/x.cc";
  f.threads.push_back(f.threads[0]);
  f.threads.back().python.clear();
  f.threads.back().native.clear();
  return f;
}

TEST_F(StackFileThreadsTest, ReadsWhatTheToolsWriteThreadByThread) {
  for (const StackFile& f : HangOf4()) ExpectSame(StackFileToJson(f), true);
  ExpectSame(StackFileToJson(Tricky()), true);
  ExpectSame(StackFileToJson(Tricky(), 2), true);  // pretty-printed: white space everywhere
}

TEST_F(StackFileThreadsTest, ReadsAnyOrderOfFieldsAndOddValues) {
  std::string threads = nlohmann::json::parse(StackFileToJson(Tricky()))["threads"].dump();
  // "threads" before the fields that say whose it is.
  ExpectSame(R"({"threads": )" + threads +
                 R"(, "format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4, "pid": 7})",
             true);
  // Unknown fields around it, holding objects, arrays and strings that look like keys.
  ExpectSame(R"({"x": {"threads": [1, 2]}, "format": "xtimer-stacktrace", "version": 1, "y": ["]", "}"],)"
             R"( "rank": 1, "world_size": 4, "threads": )" +
                 threads + R"(, "z": "\"threads\": []"})",
             true);
  // No threads at all, an empty array, null.
  ExpectSame(R"({"format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4, "threads": []})", true);
  ExpectSame(R"({"format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4, "threads": null})", true);
  ExpectSame(R"({"format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4})", true);
}

TEST_F(StackFileThreadsTest, RefusesBadFilesWithTheWholeParsesReason) {
  std::string good = StackFileToJson(Tricky());
  const std::string head = R"({"format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4, )";
  for (const std::string& bad : std::vector<std::string>{
           good.substr(0, good.size() / 2),                                     // truncated in a thread
           good.substr(0, good.size() - 1),                                     // the root not closed
           good + "x",                                                          // content after it
           good.substr(0, good.find("\"threads\"")) + "\"threads\": [{}, 1]}",  // not an object
           head + R"("threads": [{"tid": "x"}]})",                              // a type error in a thread
           head + R"("threads": [{"tid": 1} {"tid": 2}]})",                     // no comma
           head + R"("threads": [{"tid": 1},]})",                               // a trailing comma
           head + R"("threads": [{"tid": 1}, {"native": [{"line": 01}]}]})",    // bad number in a thread
           head + R"("threads": [{"tid": 1}], "threads": []})",                 // twice
           head + R"("thr\u0065ads": [{"tid": "x"}]})",                         // an escaped key
           R"({"format": "xtimer-stacktrace", "version": 2, "rank": 1, "world_size": 4, "threads": [{"tid": "x"}]})",
           R"({"format": "xtimer-stacktrace", "version": 1, "rank": 9, "world_size": 4, "threads": []})",
           R"({"format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4, "threads": [{"tid": 1}]} )"
           R"({"a": 1})",
           std::string("[1, 2]"),
           std::string("  "),
       }) {
    ExpectSame(bad, false);
  }
  // Both readers refused all of these but the two valid ones: check that the loop tested refusals.
  std::string error;
  EXPECT_EQ(ReadWhole(Write("t.stacktrace", head + R"("threads": [{"tid": "x"}]})"), &error), "");
  EXPECT_EQ(error, "field \"tid\": expected an integer");
}

TEST_F(StackFileThreadsTest, AnEscapedThreadsKeyOrADeepThreadIsReadWhole) {
  const std::string head = R"({"format": "xtimer-stacktrace", "version": 1, "rank": 1, "world_size": 4, )";
  ExpectSame(head + R"("thr\u0065ads": [{"tid": 5}]})", false);
  // An unknown field nested 1,010 levels in a thread: the whole parse's depth limit decides.
  std::string deep = std::string(1010, '[') + std::string(1010, ']');
  ExpectSame(head + R"("threads": [{"tid": 5, "x": )" + deep + "}]}", false);
  std::string shallow = std::string(900, '[') + std::string(900, ']');
  ExpectSame(head + R"("threads": [{"tid": 5, "x": )" + shallow + "}]}", true);
}

TEST_F(StackFileThreadsTest, SplitsTheSameWhateverThePiecesAre) {
  std::string text = StackFileToJson(Tricky(), 1);
  struct Spans : StackThreadsSplitter::Events {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    uint64_t begin = 0;
    void ElementBegin(uint64_t offset) override { begin = offset; }
    bool ElementEnd(uint64_t end) override { return spans.emplace_back(begin, end), true; }
  };
  Spans all;
  StackThreadsSplitter whole(true);
  ASSERT_TRUE(whole.Scan(text.data(), text.size(), all));
  ASSERT_TRUE(whole.Complete());
  ASSERT_EQ(all.spans.size(), Tricky().threads.size());
  for (auto [b, e] : all.spans) {
    EXPECT_EQ(text[b], '{');
    EXPECT_EQ(text[e - 1], '}');
  }
  EXPECT_EQ(nlohmann::json::parse(whole.header())["threads"], nlohmann::json::array());
  for (size_t piece : {1, 2, 3, 7, 64}) {
    Spans got;
    StackThreadsSplitter s(true);
    for (size_t at = 0; at < text.size(); at += piece)
      ASSERT_TRUE(s.Scan(text.data() + at, std::min(piece, text.size() - at), got));
    EXPECT_TRUE(s.Complete());
    EXPECT_EQ(got.spans, all.spans) << piece;
    EXPECT_EQ(s.header(), whole.header()) << piece;
  }
}

TEST_F(StackFileThreadsTest, LargeFilesAreSplitAndAFileChangedBetweenTheReadsIsNamed) {
  StackFile big = HangOf4()[0];
  const size_t base = big.threads.size();
  while (big.threads.size() < 20000) big.threads.push_back(big.threads[big.threads.size() % base]);
  std::string text = StackFileToJson(big);
  ASSERT_GT(text.size(), StackFileThreads::Options().whole_below);
  std::string path = Write("big.stacktrace", text);
  StackFileThreads f;
  std::string error;
  ASSERT_TRUE(f.Open(path, &error)) << error;
  EXPECT_FALSE(f.whole());
  EXPECT_EQ(f.header().rank, big.rank);
  size_t n = 0;
  ASSERT_TRUE(f.ForEach([&](const StackThread&, size_t) { ++n; }, &error)) << error;
  EXPECT_EQ(n, big.threads.size());
  // Cut in place (the same inode): the second read finds half a file.
  std::filesystem::resize_file(path, text.size() / 2);
  EXPECT_FALSE(f.ForEach([](const StackThread&, size_t) {}, &error));
  EXPECT_EQ(error.rfind("the file changed while it was read", 0), 0u) << error;
}

// Every node of a tree as its path of frame names, its ranks, threads and whether a main thread
// ends there: equal for two merges of the same stacks, whatever the node ids.
std::multiset<std::string> Stacks(const MergedStacks& m, const StackTree& t) {
  std::multiset<std::string> out;
  for (uint32_t i = 1; i < t.size(); ++i) {
    std::string path;
    for (uint32_t at = i; at != StackTree::kRoot; at = t.node(at).parent)
      path = m.frames[t.node(at).frame].Short() + ";" + path;
    const TreeNode& n = t.node(i);
    out.insert(path + " ranks " + RankSet(n.ranks).Fold() + " ends " + RankSet(n.end_ranks).Fold() + " threads " +
               std::to_string(n.threads) + (n.main_ends ? " main" : ""));
  }
  return out;
}

TEST_F(StackFileThreadsTest, TheFolderMergeOfALargeFileEqualsTheWholeMerge) {
  // Rank 0 large enough to be read thread by thread, its main thread neither first nor last;
  // ranks 1-3 small. The folded output and the verdict's main-thread stacks must be those of a
  // merge of the parsed files.
  std::vector<StackFile> files = HangOf4();
  StackFile& big = files[0];
  std::vector<StackThread> extra(20000, big.threads.back());
  for (size_t i = 0; i < extra.size(); ++i) {
    extra[i].main = false;
    extra[i].tid = 100000 + static_cast<int64_t>(i);
    extra[i].native.resize(1 + i % 5);
  }
  big.threads.insert(big.threads.begin(), extra.begin(), extra.end());
  StackMerger direct(MergeOptions{.world_size = 4});
  for (const StackFile& f : files) {
    char name[64];
    std::snprintf(name, sizeof name, "%05d-00004.stacktrace", f.rank);
    Write(name, StackFileToJson(f));
    std::string error;
    ASSERT_TRUE(direct.Add(f, name, &error)) << error;
  }
  ASSERT_GT(std::filesystem::file_size(dir_ / "00000-00004.stacktrace"), StackFileThreads::Options().whole_below);
  MergedStacks expect = std::move(direct).Finish();
  for (int threads : {1, 2}) {
    MergedStacks got;
    std::string error;
    FolderOptions folder;
    folder.threads = threads;
    ASSERT_TRUE(MergeStackFolder(dir_.string(), MergeOptions{}, folder, &got, &error)) << error;
    ASSERT_EQ(got.ranks.size(), 4u);
    EXPECT_TRUE(got.skipped.empty());
    for (size_t r = 0; r < 4; ++r) {
      auto names = [&](const MergedStacks& m, const std::vector<uint32_t>& ids) {
        std::vector<std::string> out;
        for (uint32_t id : ids) out.push_back(m.frames[id].Short());
        return out;
      };
      EXPECT_EQ(names(got, got.ranks[r].main_python), names(expect, expect.ranks[r].main_python)) << r;
      EXPECT_EQ(names(got, got.ranks[r].main_native), names(expect, expect.ranks[r].main_native)) << r;
    }
    EXPECT_EQ(Stacks(got, got.native), Stacks(expect, expect.native));
    EXPECT_EQ(Stacks(got, got.python), Stacks(expect, expect.python));
    EXPECT_EQ(got.frames.size(), expect.frames.size());
  }
}

}  // namespace
}  // namespace xtimer

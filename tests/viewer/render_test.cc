// The renderers writing into sinks, and WriteMergeOutputs streaming them into files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "common/atomic_file.h"
#include "tests/viewer/stack_json.h"
#include "viewer/call_graph.h"
#include "viewer/flame_svg.h"
#include "viewer/folded_writer.h"
#include "viewer/merge_output.h"
#include "viewer/speedscope_writer.h"
#include "viewer/stack_merger.h"
#include "viewer/tree_view.h"
#include "viewer/verdict.h"

namespace xtimer {
namespace {

using namespace xtimer::testing;
namespace fs = std::filesystem;

MergedStacks Merge(const std::vector<StackFile>& files) {
  StackMerger m;
  std::string error;
  for (const StackFile& f : files) m.Add(f, "rank" + std::to_string(f.rank), &error);
  return std::move(m).Finish();
}

// The speedscope file as it was written before it was streamed: a whole nlohmann-json document,
// dumped compact with bad UTF-8 replaced. The streamed writer must give the same bytes.
std::string SpeedscopeDocument(const TreeView& v, std::string_view name) {
  using J = nlohmann::ordered_json;
  J frames = J::array(), samples = J::array(), weights = J::array();
  std::vector<std::string> label(v.tree->size());
  for (uint32_t i = 1; i < v.tree->size(); ++i) label[i] = v.Label(i);
  std::unordered_map<std::string_view, size_t> frame_index;
  std::vector<size_t> index(v.tree->size(), 0);
  uint64_t total = 0;
  std::vector<size_t> path;
  for (uint32_t i = 1; i < v.tree->size(); ++i) {
    auto [it, fresh] = frame_index.try_emplace(label[i], frames.size());
    if (fresh) frames.push_back({{"name", label[i]}});
    index[i] = it->second;
    if (v.self[i] == 0) continue;
    path.clear();
    for (uint32_t at = i; at != StackTree::kRoot; at = v.tree->node(at).parent) path.push_back(at);
    J sample = J::array();
    for (auto p = path.rbegin(); p != path.rend(); ++p) sample.push_back(index[*p]);
    samples.push_back(std::move(sample));
    weights.push_back(v.self[i]);
    total += v.self[i];
  }
  J j;
  j["$schema"] = "https://www.speedscope.app/file-format-schema.json";
  j["shared"] = {{"frames", frames}};
  j["profiles"] = J::array({J{{"type", "sampled"},
                              {"name", name},
                              {"unit", "none"},
                              {"startValue", 0},
                              {"endValue", total},
                              {"samples", samples},
                              {"weights", weights}}});
  j["name"] = name;
  j["activeProfileIndex"] = 0;
  j["exporter"] = "xtimer_stacktrace_viewer";
  return j.dump(-1, ' ', false, J::error_handler_t::replace) + "\n";
}

std::string Speedscope(const TreeView& v, std::string_view name, uint64_t (*label_hash)(std::string_view) = nullptr) {
  StringSink out;
  WriteSpeedscope(v, name, out, label_hash);
  return out.Take();
}

// The hang of four ranks, with frame names that need escaping in JSON (quotes, backslashes,
// bad UTF-8, controls) and a frame whose label repeats under two parents.
std::vector<StackFile> HostileHang() {
  std::vector<StackFile> files = HangOf4();
  files[1].threads[0].python.back().function = "say \"hi\" \\ back\\slash";
  files[2].threads[0].native.back().function = "bad\xff\xfe utf8 \xe2\x82 \x01\b\f\n\t end";
  files[3].threads[0].native.push_back(Native("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  files[3].threads[1].native.push_back(Native("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  return files;
}

TEST(Speedscope, SameBytesAsTheJsonDocument) {
  for (const std::vector<StackFile>& files : {HangOf4(), HostileHang(), std::vector<StackFile>{}}) {
    MergedStacks m = Merge(files);
    for (const StackTree* tree : {&m.python, &m.native}) {
      for (bool collapse : {false, true}) {
        TreeView view = MakeTreeView(m, *tree, {.collapse_idle = collapse});
        EXPECT_EQ(Speedscope(view, "py_stack"), SpeedscopeDocument(view, "py_stack"));
      }
    }
  }
}

// The distinct labels are found by hash: different labels with one hash still get their own
// frame, the same label twice one frame.
TEST(Speedscope, LabelsWhoseHashesCollideStayApart) {
  MergedStacks m = Merge(HostileHang());
  for (const StackTree* tree : {&m.python, &m.native}) {
    TreeView view = MakeTreeView(m, *tree, {});
    std::string expected = SpeedscopeDocument(view, "x");
    EXPECT_EQ(Speedscope(view, "x", [](std::string_view) -> uint64_t { return 7; }), expected);
    EXPECT_EQ(Speedscope(view, "x", [](std::string_view s) -> uint64_t { return s.size() % 3; }), expected);
  }
}

// Names that are not clean text: each maximal bad UTF-8 sequence becomes one U+FFFD as
// nlohmann-json's replace handler makes it, controls are escaped.
TEST(Speedscope, EscapesAndReplacesAsTheJsonLibrary) {
  MergedStacks m = Merge(HostileHang());
  TreeView view = MakeTreeView(m, m.native, {});
  for (std::string name :
       {std::string("a\"b\\c\x01\x1f\x7f\b\f\n\r\t"), std::string("end\xe2\x82"), std::string("\xc3"),
        std::string("x\xe2\x82y\xe0\x80z\xf4\x90\x80\x80w\xed\xa0\x80v\xc0\xafu\xf5\xff"),
        std::string("ok\xf0\x9f\x98\x80\xf0\x9f\x98"), std::string("nul\0in", 6)}) {
    std::string streamed = Speedscope(view, name);
    EXPECT_EQ(streamed, SpeedscopeDocument(view, name)) << name;
    nlohmann::json parsed = nlohmann::json::parse(streamed, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(parsed.is_discarded()) << name;
    EXPECT_EQ(parsed["profiles"][0]["samples"].size(), parsed["profiles"][0]["weights"].size());
  }
}

TEST(Speedscope, SamplesArePathsOfFrameNumbers) {
  MergedStacks m = Merge(HangOf4());
  TreeView view = MakeTreeView(m, m.python, {});
  nlohmann::json j = nlohmann::json::parse(Speedscope(view, "py_stack"));
  const auto& frames = j["shared"]["frames"];
  const auto& profile = j["profiles"][0];
  ASSERT_GT(profile["samples"].size(), 0u);
  uint64_t total = 0;
  for (const auto& w : profile["weights"]) total += w.get<uint64_t>();
  EXPECT_EQ(profile["endValue"].get<uint64_t>(), total);
  EXPECT_EQ(total, view.total[StackTree::kRoot]);
  for (const auto& sample : profile["samples"])
    for (const auto& f : sample) EXPECT_LT(f.get<size_t>(), frames.size());
}

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Enough distinct threads that the native outputs are several write blocks long.
std::vector<StackFile> ManyThreads(int threads) {
  std::vector<StackFile> files = HangOf4();
  for (int t = 0; t < threads; ++t) {
    StackThread& th = files[t % 4].threads.emplace_back();
    th.tid = 5000 + t;
    th.name = "worker";
    th.state = "S";
    for (int d = 0; d < 24; ++d)
      th.native.push_back(Native("worker_loop_" + std::to_string(t) + "_level_" + std::to_string(d) + "(int)",
                                 "/usr/lib/libworker.so", "src/worker/level.cc", d));
  }
  return files;
}

class OutputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("render_test." + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The files hold exactly what the renderers write into a string, across many write blocks.
TEST_F(OutputsTest, StreamedFilesHoldTheRenderings) {
  MergedStacks m = Merge(ManyThreads(3000));
  Verdict verdict = ComputeVerdict(m);
  OutputResult result;
  std::string error;
  ASSERT_TRUE(WriteMergeOutputs(m, verdict, {.render_dot = false}, dir_.string(), &result, &error)) << error;
  TreeView view = MakeTreeView(m, m.native, {});
  StringSink folded, svg;
  WriteFolded(view, folded);
  ASSERT_GT(folded.str().size(), 2 * kAtomicWriteBlock);
  EXPECT_EQ(Read(dir_ / "cpp_stack.folded"), folded.str());
  EXPECT_EQ(Read(dir_ / "cpp_stack.speedscope.json"), SpeedscopeDocument(view, "cpp_stack"));
  std::string file_svg = Read(dir_ / "cpp_stack.svg");
  EXPECT_EQ(file_svg.substr(0, 5), "<?xml");
  EXPECT_EQ(file_svg.substr(file_svg.size() - 7), "</svg>\n");
  EXPECT_EQ(Read(dir_ / "verdict.json"), VerdictToJson(verdict));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// A disk that fills up midway (here: a file size limit the kernel enforces, in a child process):
// WriteMergeOutputs fails with one line naming the file, the old file is untouched, no temp file
// is left. Returns 0 when so.
int WriteOutputsUnderAFileSizeLimit(const fs::path& dir) {
  signal(SIGXFSZ, SIG_IGN);
  MergedStacks m = Merge(ManyThreads(3000));
  struct rlimit lim = {kAtomicWriteBlock + 10, kAtomicWriteBlock + 10};
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
  OutputResult result;
  std::string error;
  if (WriteMergeOutputs(m, ComputeVerdict(m), {.formats = kFormatFolded}, dir.string(), &result, &error)) return 11;
  if (error.find("cannot write " + (dir / "cpp_stack.folded").string() + ".tmp.") != 0) return 12;
  if (error.find('\n') != std::string::npos) return 13;
  if (result.written != std::vector<std::string>{"py_stack.folded"}) return 14;
  return 0;
}

TEST_F(OutputsTest, FullDiskKeepsTheOldFileAndSaysWhich) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "cpp_stack.folded") << "old\n";
  EXPECT_EXIT(std::exit(WriteOutputsUnderAFileSizeLimit(dir_)), ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(Read(dir_ / "cpp_stack.folded"), "old\n");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

}  // namespace
}  // namespace xtimer

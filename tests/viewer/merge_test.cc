// Merging, labels, grouping and suspects on hand-made stack sets.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "tests/viewer/stack_json.h"
#include "viewer/call_graph.h"
#include "viewer/folded_writer.h"
#include "viewer/frame_label.h"
#include "viewer/stack_merger.h"
#include "viewer/tree_view.h"
#include "viewer/verdict.h"

namespace xtimer {
namespace {

using namespace xtimer::testing;

MergedStacks Merge(const std::vector<StackFile>& files, int32_t world = 0) {
  StackMerger m({.world_size = world});
  std::string error;
  for (const StackFile& f : files) m.Add(f, "rank" + std::to_string(f.rank), &error);
  return std::move(m).Finish();
}

// The renderers write into a sink; these tests compare their text.
std::string WriteFolded(const TreeView& v) {
  StringSink out;
  xtimer::WriteFolded(v, out);
  return out.Take();
}
std::string WriteCallGraphDot(const TreeView& v, const CallGraphOptions& o) {
  StringSink out;
  xtimer::WriteCallGraphDot(v, o, out);
  return out.Take();
}

template <typename T>
bool Has(const std::vector<T>& v, const T& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::vector<StackFile> AllIn(int32_t world, int64_t seq) {
  std::vector<StackFile> files;
  for (int32_t r = 0; r < world; ++r) {
    StackFile f = HangOf4()[0];
    f.rank = r;
    f.world_size = world;
    f.inflight_ops = {Collective("3a9f0c12", seq, world)};
    files.push_back(f);
  }
  return files;
}

TEST(Label, FollowsTheSeedToolsFormat) {
  FrameInfo f;
  f.origin = FrameInfo::Origin::kPython;
  f.function = "load_batch";
  f.file = "train.py";
  f.line = 88;
  EXPECT_EQ(FrameLabel(f, RankSet({0, 1, 2, 3, 5, 7, 8}), 10), "load_batch@train.py:88@0-3/5/7-8|4/6/9");
  EXPECT_EQ(FrameLabel(f, RankSet::Range(0, 4), 4), "load_batch@train.py:88@0-3|");
  FrameInfo raw;  // unsymbolised: module+offset
  raw.module = "/usr/lib/libnccl.so.2";
  raw.offset = "0x77f0";
  EXPECT_EQ(FrameLabel(raw, RankSet({2}), 4), "libnccl.so.2+0x77f0@/usr/lib/libnccl.so.2@2|0-1/3");
}

TEST(Label, CleansTextThatWouldBreakTheFormats) {
  EXPECT_EQ(CleanFrameText("a;b"), "a:b");
  EXPECT_EQ(CleanFrameText("  f\n\t(x)  "), "f (x)");
  EXPECT_EQ(CleanFrameText(""), "?");
  EXPECT_EQ(CleanFrameText("bad\xff\xfe utf8 \xe2\x82"), "bad?? utf8 ??");
  EXPECT_EQ(CleanFrameText("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(CleanFrameText(std::string("nul\0in", 6)), "nul in");
}

// C1 controls (U+0080..U+009F) are controls too: U+009B is CSI, "\u009b2J" clears a terminal.
TEST(Label, CleansC1Controls) {
  EXPECT_EQ(CleanFrameText("a\u009b2Jb"), "a 2Jb");
  EXPECT_EQ(CleanFrameText("x\u0085y\u0080z\u009f"), "x y z");
  EXPECT_EQ(CleanFrameText("\u00a0nbsp"), "\u00a0nbsp");  // U+00A0 is not a control
  EXPECT_EQ(PrintableName("f\u009b31mred"), "f?31mred");
  EXPECT_EQ(PrintableName("esc\x1b[0m"), "esc?[0m");
}

// A hostile frame name gets to no output with its C1 control: folded file, verdict lines.
TEST(Label, C1ControlsReachNoOutput) {
  std::vector<StackFile> files = HangOf4();
  files[2].threads[0].python.back().function = "load\u009b2J_batch";
  files[2].threads[0].native.back().function = "spin\u009b31m";
  MergedStacks m = Merge(files);
  std::string all;
  for (const StackTree* t : {&m.python, &m.native}) all += WriteFolded(MakeTreeView(m, *t, {}));
  Verdict v = ComputeVerdict(m);
  for (const std::string& line : v.summary) all += line + "\n";
  all += VerdictToJson(v);
  EXPECT_NE(all.find("load 2J_batch"), std::string::npos) << all;
  EXPECT_EQ(all.find("\xc2\x9b"), std::string::npos) << "U+009B reached an output";
}

TEST(Merge, BuildsOnePrefixTreeWithTheRanksOfEachFrame) {
  MergedStacks m = Merge(HangOf4());
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(m.ranks.size(), 4u);
  TreeView py = MakeTreeView(m, m.python, {});
  std::string folded = WriteFolded(py);
  EXPECT_EQ(folded,
            "<module>@train.py:160@0-3|;train_step@train.py:140@2|0-1/3;load_batch@train.py:88@2|0-1/3 1\n"
            "<module>@train.py:160@0-3|;train_step@train.py:142@0-1/3|2;"
            "all_reduce@torch/distributed/distributed_c10d.py:2050@0-1/3|2 3\n");
  TreeView native = MakeTreeView(m, m.native, {});
  std::string cpp = WriteFolded(native);
  // The pool thread every rank has: one line, count = 4 ranks (not 4 threads of one rank).
  EXPECT_NE(
      cpp.find("clone3@/usr/lib/x86_64-linux-gnu/libc.so.6@0-3|;start_thread@/usr/lib/x86_64-linux-gnu/libc.so.6@0-3|;"
               "pthread_cond_wait@/usr/lib/x86_64-linux-gnu/libc.so.6@0-3|;[S: sleeping]@thread state@0-3| 4\n"),
      std::string::npos)
      << cpp;
  EXPECT_NE(cpp.find("ncclAllReduce@/usr/lib/libnccl.so.2@0-1/3|2;[S: sleeping]@thread state@0-1/3|2 3\n"),
            std::string::npos)
      << cpp;
}

TEST(Merge, CountsRanksNotThreads) {
  // Three identical pool threads in one rank are one rank at that frame.
  StackFile f = HangOf4()[0];
  f.threads.push_back(f.threads[1]);
  f.threads.push_back(f.threads[1]);
  MergedStacks m = Merge({f}, 4);
  std::string cpp = WriteFolded(MakeTreeView(m, m.native, {}));
  EXPECT_NE(
      cpp.find("pthread_cond_wait@/usr/lib/x86_64-linux-gnu/libc.so.6@0|1-3;[S: sleeping]@thread state@0|1-3 1\n"),
      std::string::npos)
      << cpp;
}

TEST(Merge, UnsymbolisedFramesMergeByModuleAndOffset) {
  std::vector<StackFile> files = HangOf4();
  for (StackFile& f : files) {
    f.threads.resize(1);
    f.threads[0].python.clear();
    f.threads[0].native = {Native("", "/usr/lib/libnccl.so.2"), Native("", "/usr/lib/libnccl.so.2")};
    f.threads[0].native[1].offset = f.rank == 2 ? "0x20" : "0x10";
  }
  MergedStacks m = Merge(files);
  std::string cpp = WriteFolded(MakeTreeView(m, m.native, {}));
  EXPECT_EQ(cpp,
            "libnccl.so.2+0x1000@/usr/lib/libnccl.so.2@0-3|;libnccl.so.2+0x10@/usr/lib/libnccl.so.2@0-1/3|2;"
            "[S: sleeping]@thread state@0-1/3|2 3\n"
            "libnccl.so.2+0x1000@/usr/lib/libnccl.so.2@0-3|;libnccl.so.2+0x20@/usr/lib/libnccl.so.2@2|0-1/3;"
            "[S: sleeping]@thread state@2|0-1/3 1\n");
}

TEST(FrameTable, IsAgreesWithIntern) {
  // FrameTable::Is is the merger's shortcut; it must say yes exactly where Intern gives the id.
  FrameTable t;
  std::vector<NativeFrame> native = {Native("f", "/lib/a.so", "a.cc", 10),
                                     Native("f", "/lib/b.so", "a.cc", 10),  // same: file names it
                                     Native("f", "/lib/a.so", "a.cc", 11),
                                     Native("f", "/lib/a.so"),
                                     Native("f", "/lib/b.so"),
                                     Native("", "/lib/a.so"),
                                     Native("", "/lib/b.so"),
                                     Native("g", "/lib/a.so", "a.cc", 10)};
  native[1].offset = "0x99";  // symbolised: the offset does not matter
  NativeFrame raw = Native("", "/lib/a.so");
  raw.offset = "0x2000";
  native.push_back(raw);
  native.push_back(Native("", "/lib/a.so", "a.cc", 10));  // a file but no function: the offset counts
  native.push_back(native.back());
  native.back().offset = "0x3000";
  native.push_back(Native("", "/lib/a.so", "", 10));  // no file: the line does not count
  std::vector<PythonFrame> python = {Py("f", "a.cc", 10), Py("f", "a.cc", 11), Py("g", "a.cc", 10), Py("f", "", 3)};
  std::vector<uint32_t> ids;
  for (const NativeFrame& f : native) ids.push_back(t.Intern(f));
  for (const PythonFrame& f : python) ids.push_back(t.Intern(f));
  for (size_t i = 0; i < native.size(); ++i)
    for (uint32_t id : ids) EXPECT_EQ(t.Is(id, native[i]), id == ids[i]) << "native " << i << " id " << id;
  for (size_t i = 0; i < python.size(); ++i)
    for (uint32_t id : ids) EXPECT_EQ(t.Is(id, python[i]), id == ids[native.size() + i]) << "python " << i;
  // Frames that differ only where identity ignores them.
  NativeFrame no_file_other_line = native[11];
  no_file_other_line.line = 99;
  EXPECT_TRUE(t.Is(ids[11], no_file_other_line));
  PythonFrame py_no_file_other_line = python[3];
  py_no_file_other_line.line = 4;
  EXPECT_TRUE(t.Is(ids[native.size() + 3], py_no_file_other_line));
  EXPECT_EQ(t.Intern(py_no_file_other_line), ids[native.size() + 3]);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_FALSE(t.Is(12345, python[0]));
}

TEST(StackTree, PathMemoBuildsTheSameTree) {
  // AddPath's memo (the nodes of the path added last at a thread index) is a shortcut: paths that
  // repeat, diverge, rejoin, grow and shrink must give the tree that plain lookups give.
  std::vector<std::vector<uint32_t>> paths = {{0, 0, 0},       {1, 2, 3}, {1, 2, 3},       {1, 2, 4}, {1, 5, 3},
                                              {1, 2, 3, 4, 5}, {1, 2},    {0, 1, 2, 3},    {1, 2, 3}, {7},
                                              {1, 2, 3, 4, 5}, {2, 2, 3}, {1, 2, 3, 4, 6}, {0}};
  StackTree plain, memoised;
  std::vector<uint32_t> memo;
  for (size_t i = 0; i < paths.size(); ++i) {
    uint32_t leaf = plain.AddPath(paths[i], static_cast<int32_t>(i));
    uint32_t memo_leaf = memoised.AddPath(paths[i], static_cast<int32_t>(i), &memo);
    EXPECT_EQ(leaf, memo_leaf);
    if (i % 3 == 0) plain.MarkMainEnd(leaf), memoised.MarkMainEnd(memo_leaf);
  }
  ASSERT_EQ(plain.size(), memoised.size());
  for (size_t n = 0; n < plain.size(); ++n) {
    const TreeNode& a = plain.node(static_cast<uint32_t>(n));
    const TreeNode& b = memoised.node(static_cast<uint32_t>(n));
    EXPECT_EQ(a.frame, b.frame) << n;
    EXPECT_EQ(a.parent, b.parent) << n;
    EXPECT_EQ(a.depth, b.depth) << n;
    EXPECT_EQ(a.ranks, b.ranks) << n;
    EXPECT_EQ(a.end_ranks, b.end_ranks) << n;
    EXPECT_EQ(a.threads, b.threads) << n;
    EXPECT_EQ(a.main_ends, b.main_ends) << n;
  }
}

TEST(Merge, RefusesDuplicateRanksAndOtherWorldSizes) {
  StackMerger m;
  std::string error;
  auto files = HangOf4();
  ASSERT_TRUE(m.Add(files[0], "a", &error));
  EXPECT_FALSE(m.Add(files[0], "b", &error));
  EXPECT_NE(error.find("already read"), std::string::npos);
  StackFile other = files[1];
  other.world_size = 8;
  EXPECT_FALSE(m.Add(other, "c", &error));
  EXPECT_NE(error.find("world_size 8 disagrees with 4"), std::string::npos);
  MergedStacks out = std::move(m).Finish();
  ASSERT_EQ(out.skipped.size(), 2u);
  EXPECT_EQ(out.skipped[0].source, "b");
  EXPECT_EQ(out.ranks.size(), 1u);
}

TEST(Merge, AbsorbGivesTheSameResultAsOneMerger) {
  auto files = HangOf4();
  StackMerger a({.world_size = 4}), b({.world_size = 4});
  std::string error;
  a.Add(files[0], "0", &error);
  b.Add(files[1], "1", &error);
  b.Add(files[2], "2", &error);
  a.Add(files[3], "3", &error);
  a.Absorb(std::move(b));
  MergedStacks split = std::move(a).Finish();
  MergedStacks whole = Merge(files);
  EXPECT_EQ(WriteFolded(MakeTreeView(split, split.python, {})), WriteFolded(MakeTreeView(whole, whole.python, {})));
  EXPECT_EQ(WriteFolded(MakeTreeView(split, split.native, {})), WriteFolded(MakeTreeView(whole, whole.native, {})));
  EXPECT_EQ(VerdictToJson(ComputeVerdict(split)), VerdictToJson(ComputeVerdict(whole)));
}

TEST(Merge, CollapsesIdleThreadsOnlyWhenAsked) {
  MergedStacks m = Merge(HangOf4());
  std::string all = WriteFolded(MakeTreeView(m, m.native, {}));
  TreeView collapsed = MakeTreeView(m, m.native, {.collapse_idle = true});
  std::string some = WriteFolded(collapsed);
  EXPECT_NE(all.find("pthread_cond_wait"), std::string::npos);
  EXPECT_EQ(some.find("pthread_cond_wait"), std::string::npos);
  EXPECT_EQ(collapsed.collapsed_stacks, 1u);
  EXPECT_NE(some.find("ncclAllReduce"), std::string::npos);  // main threads stay
  // An idle thread that one rank lacks is not the same everywhere: kept.
  auto files = HangOf4();
  files[3].threads.pop_back();
  MergedStacks m2 = Merge(files);
  EXPECT_NE(WriteFolded(MakeTreeView(m2, m2.native, {.collapse_idle = true})).find("pthread_cond_wait"),
            std::string::npos);
}

TEST(Merge, ThreadsPythonNamedEndWithTheirName) {
  std::vector<StackFile> files = HangOf4();
  for (StackFile& f : files) {
    f.threads[0].python_name = "MainThread";
    f.threads[1].python_name = "pin;memory";  // ';' would split a folded frame
  }
  MergedStacks m = Merge(files);
  std::string py = WriteFolded(MakeTreeView(m, m.python, {}));
  EXPECT_NE(py.find("all_reduce@torch/distributed/distributed_c10d.py:2050@0-1/3|2;"
                    "[thread: MainThread]@thread name@0-1/3|2 3\n"),
            std::string::npos)
      << py;
  std::string cpp = WriteFolded(MakeTreeView(m, m.native, {}));
  EXPECT_NE(cpp.find("pthread_cond_wait@/usr/lib/x86_64-linux-gnu/libc.so.6@0-3|;[S: sleeping]@thread state@0-3|;"
                     "[thread: pin:memory]@thread name@0-3| 4\n"),
            std::string::npos)
      << cpp;
  // The verdict reads the stacks without the name.
  EXPECT_EQ(ComputeVerdict(m).groups[0].leaf_frames[0], ComputeVerdict(Merge(HangOf4())).groups[0].leaf_frames[0]);
  // A named idle thread still collapses; a thread named but running does not.
  TreeView collapsed = MakeTreeView(m, m.native, {.collapse_idle = true});
  EXPECT_EQ(collapsed.collapsed_stacks, 1u);
  for (StackFile& f : files) f.threads[1].state = "R";
  MergedStacks running = Merge(files);
  EXPECT_EQ(MakeTreeView(running, running.native, {.collapse_idle = true}).collapsed_stacks, 0u);
}

TEST(Verdict, AllRanksIdenticalHasNoSuspect) {
  MergedStacks m = Merge(AllIn(8, 500));
  Verdict v = ComputeVerdict(m);
  EXPECT_TRUE(v.suspects.empty());
  EXPECT_TRUE(v.all_agree);
  ASSERT_EQ(v.groups.size(), 1u);
  EXPECT_EQ(v.groups[0].ranks.Fold(), "0-7");
  EXPECT_EQ(v.groups[0].by, StackSource::kPython);
  EXPECT_EQ(v.groups[0].leaf_frames[0], "all_reduce (distributed_c10d.py:2050)");
  EXPECT_EQ(v.summary.back(), "no suspect: every rank is in the same place");
}

TEST(Verdict, NamesTheRankNotInTheCollective) {
  Verdict v = ComputeVerdict(Merge(HangOf4()));
  ASSERT_EQ(v.suspects.size(), 1u);
  const Suspect& s = v.suspects[0];
  EXPECT_EQ(s.rank, 2);
  EXPECT_TRUE(Has(s.kinds, SuspectKind::kAbsent));
  EXPECT_TRUE(Has(s.kinds, SuspectKind::kStackDiffers));
  ASSERT_FALSE(s.frames.empty());
  EXPECT_EQ(s.frames[0], "load_batch (train.py:88)");
  ASSERT_EQ(v.groups.size(), 2u);
  EXPECT_EQ(v.groups[0].ranks.Fold(), "0-1/3");
  EXPECT_EQ(v.groups[1].ranks.Fold(), "2");
  ASSERT_GE(v.summary.size(), 2u);
  EXPECT_EQ(v.summary[1],
            "ranks 0-1/3 wait in ncclAllReduce #1234 (comm 3a9f0c12); rank 2 is not in it: "
            "load_batch (train.py:88) <- train_step (train.py:140) <- <module> (train.py:160)");
}

TEST(Verdict, NamesBothRanksInAnOlderCollective) {
  std::vector<StackFile> files = AllIn(8, 1234);
  files[2].inflight_ops = {Collective("3a9f0c12", 1233, 8)};
  files[5].inflight_ops = {Collective("3a9f0c12", 1233, 8), Collective("3a9f0c12", 1234, 8)};  // queued behind
  Verdict v = ComputeVerdict(Merge(files));
  ASSERT_EQ(v.suspects.size(), 2u);
  EXPECT_EQ(v.suspects[0].rank, 2);
  EXPECT_EQ(v.suspects[1].rank, 5);
  EXPECT_EQ(v.suspects[0].kinds, std::vector{SuspectKind::kBehind});
  EXPECT_NE(v.suspects[0].reason.find("#1233"), std::string::npos);
  ASSERT_FALSE(v.comms.empty());
  EXPECT_EQ(v.comms[0].waiting.Fold(), "0-1/3-4/6-7");
  EXPECT_EQ(v.comms[0].behind.size(), 2u);
  EXPECT_FALSE(v.all_agree);
  bool line = false;
  for (const std::string& l : v.summary)
    line |=
        l.find("ranks 0-1/3-4/6-7 wait in ncclAllReduce #1234 (comm 3a9f0c12); ranks 2/5 are behind (in #1233): ") == 0;
  EXPECT_TRUE(line) << ::testing::PrintToString(v.summary);
}

// NCCL pairs calls by order: ranks at one sequence number in another collective, or in one of
// another size, are out of step even though every rank is "in" #1234.
TEST(Verdict, NamesRanksInAnotherCollectiveAtTheSameSequenceNumber) {
  std::vector<StackFile> files = AllIn(8, 1234);
  files[3].inflight_ops = {Collective("3a9f0c12", 1234, 8, "ncclAllGather")};
  files[6].inflight_ops[0].bytes = 512 << 10;
  Verdict v = ComputeVerdict(Merge(files));
  ASSERT_FALSE(v.comms.empty());
  const CommVerdict& c = v.comms[0];
  EXPECT_FALSE(c.InStep());
  EXPECT_EQ(c.differ_seq, 1234);
  ASSERT_EQ(c.differ.size(), 3u);
  EXPECT_EQ(c.differ[0].first, "ncclAllReduce of 1 MiB");
  EXPECT_EQ(c.differ[0].second.Fold(), "0-2/4-5/7");
  ASSERT_EQ(v.suspects.size(), 2u);
  EXPECT_EQ(v.suspects[0].rank, 3);
  EXPECT_EQ(v.suspects[1].rank, 6);
  EXPECT_EQ(v.suspects[0].kinds, std::vector{SuspectKind::kOtherCall});
  EXPECT_EQ(
      v.suspects[1].reason,
      "in ncclAllReduce of 512 KiB #1234 on comm 3a9f0c12 while ranks 0-2/4-5/7 are in ncclAllReduce of 1 MiB #1234");
  bool line = false;
  for (const std::string& l : v.summary)
    line |= l.find(
                "in different collectives at #1234: ranks 0-2/4-5/7 in ncclAllReduce of 1 MiB, rank 3 in "
                "ncclAllGather of 1 MiB, rank 6 in ncclAllReduce of 512 KiB") != std::string::npos;
  EXPECT_TRUE(line) << ::testing::PrintToString(v.summary);
  const std::string json = VerdictToJson(v);
  EXPECT_NE(json.find("\"kind\": \"hang\""), std::string::npos);
  EXPECT_NE(json.find("\"other_call\""), std::string::npos);
  EXPECT_NE(json.find("\"different_calls\""), std::string::npos);
}

// A kernel that never ends on rank 1: its host went on and queued the all-reduce, so every rank
// is "in" #1234, but rank 1's has not started on its GPU while the others' runs.
TEST(Verdict, NamesARankWhoseCollectiveHasNotStartedOnItsGpu) {
  std::vector<StackFile> files = AllIn(4, 1234);
  files[1].inflight_ops[0].state = "pending";
  InflightOp stuck;
  stuck.name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>";
  stuck.kind = "kernel";
  stuck.stream = "0x0";
  stuck.state = "running";
  stuck.in_flight_s = 12.5;
  InflightOp nccl = stuck;
  nccl.name = "ncclDevKernel_AllReduce_RING_LL";
  nccl.stream = "0x5581a0c0";
  nccl.in_flight_s = 13;
  files[1].inflight_ops.push_back(nccl);
  files[1].inflight_ops.push_back(stuck);
  Verdict v = ComputeVerdict(Merge(files));
  ASSERT_EQ(v.suspects.size(), 1u) << ::testing::PrintToString(v.summary);
  EXPECT_EQ(v.suspects[0].rank, 1);
  EXPECT_EQ(v.suspects[0].kinds, std::vector{SuspectKind::kNotStarted});
  EXPECT_EQ(v.suspects[0].reason,
            "its ncclAllReduce #1234 on comm 3a9f0c12 has not started on its GPU while ranks 0/2-3 are in it; its GPU "
            "waits at void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>> (stream 0x0, "
            "no progress for 12.5 s)");
  ASSERT_FALSE(v.comms.empty());
  EXPECT_FALSE(v.comms[0].InStep());
  EXPECT_EQ(v.comms[0].not_started.Fold(), "1");
  const std::string json = VerdictToJson(v);
  EXPECT_NE(json.find("\"not_started\": [1]"), std::string::npos) << json;
  // Every rank's not started (all queued behind their own work): nobody is singled out by this.
  for (StackFile& f : files) f.inflight_ops[0].state = "pending";
  EXPECT_TRUE(ComputeVerdict(Merge(files)).comms[0].not_started.empty());
}

TEST(Verdict, NamesAMissingRank) {
  std::vector<StackFile> files = AllIn(4, 10);
  files.erase(files.begin() + 1);
  Verdict v = ComputeVerdict(Merge(files, 4));
  EXPECT_EQ(v.missing.Fold(), "1");
  EXPECT_EQ(v.reported.Fold(), "0/2-3");
  ASSERT_EQ(v.suspects.size(), 1u);
  EXPECT_EQ(v.suspects[0].rank, 1);
  EXPECT_EQ(v.suspects[0].kinds, std::vector{SuspectKind::kMissing});
  EXPECT_NE(v.summary[0].find("missing: 1"), std::string::npos);
  // The missing rank is in every frame's leak list.
  MergedStacks m = Merge(files, 4);
  EXPECT_NE(WriteFolded(MakeTreeView(m, m.python, {})).find("@0/2-3|1"), std::string::npos);
}

TEST(Verdict, NamesARankOnASubCommunicatorOnlyByCount) {
  // comm "b" has 4 members but only 3 ranks of 8 report it: one member cannot be named.
  std::vector<StackFile> files = AllIn(8, 7);
  for (int r : {0, 1, 2}) files[r].inflight_ops.push_back(Collective("b", 3, 4, "ncclAllGather"));
  Verdict v = ComputeVerdict(Merge(files));
  const CommVerdict* b = nullptr;
  for (const CommVerdict& c : v.comms)
    if (c.comm == "b") b = &c;
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->absent_unnamed, 1);
  EXPECT_TRUE(b->absent.empty());
  EXPECT_TRUE(v.suspects.empty());
}

TEST(Verdict, EvenSplitNamesNobodyByStack) {
  std::vector<StackFile> files = HangOf4();
  for (StackFile& f : files) f.inflight_ops.clear();
  files[3] = files[2];
  files[3].rank = 3;
  Verdict v = ComputeVerdict(Merge(files));
  EXPECT_TRUE(v.suspects.empty());
  EXPECT_FALSE(v.all_agree);
  EXPECT_EQ(v.groups.size(), 2u);
}

TEST(Verdict, AFileClaimingAHugeWorldStaysCheap) {
  // One rank of a claimed world of 1,048,576 (the reader's limit): labels, verdict and JSON must
  // not cost a line, a suspect or a label entry per missing rank.
  StackFile f = HangOf4()[2];
  f.rank = 7;
  f.world_size = 1 << 20;
  MergedStacks m = Merge({f});
  Verdict v = ComputeVerdict(m);
  EXPECT_EQ(v.missing.size(), (1u << 20) - 1);
  EXPECT_TRUE(v.suspects.empty());
  EXPECT_FALSE(v.all_agree);
  EXPECT_EQ(v.summary.back().rfind("note: ", 0), 0u);
  ASSERT_FALSE(v.notes.empty());
  EXPECT_NE(v.notes[0].find("1048575 ranks wrote no stack file"), std::string::npos) << v.notes[0];
  std::string folded = WriteFolded(MakeTreeView(m, m.python, {}));
  EXPECT_NE(folded.find("@7|0-6/8-1048575 "), std::string::npos) << folded;
  std::string json = VerdictToJson(v);
  EXPECT_LT(json.size(), size_t{16} << 20);
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["ranks_missing"].size(), (1u << 20) - 1);
  EXPECT_EQ(j["ranks_missing_folded"], "0-6/8-1048575");
  // Up to 256 missing ranks are each a suspect; more are a note.
  std::vector<StackFile> files = AllIn(300, 3);
  files.resize(100);
  Verdict few = ComputeVerdict(Merge(files, 300));
  EXPECT_EQ(few.suspects.size(), 200u);
  EXPECT_EQ(few.suspects.back().kinds, std::vector{SuspectKind::kMissing});
  files.resize(40);
  Verdict many = ComputeVerdict(Merge(files, 300));
  EXPECT_TRUE(many.suspects.empty());
  EXPECT_EQ(many.missing.size(), 260u);
}

// The most common start-up hang: ranks 0-2 wait in ncclCommInitRank for rank 3, which is still
// loading its data (or never wrote a stack file at all).
TEST(Verdict, CommunicatorSetUpNamesTheRankThatNeverArrived) {
  auto in_setup = [](int32_t r) {
    InflightOp op;
    op.name = "ncclCommInitRank";
    op.kind = "comm_init";
    op.state = "running";
    op.in_flight_s = 302;
    return MakeRank(r, 4, {Py("<module>", "train.py", 160), Py("init_process_group", "torch/distributed/c10d.py", 900)},
                    {Native("_start", "/usr/bin/python3.11"), Native("ncclCommInitRank", "/usr/lib/libnccl.so.2")},
                    {op});
  };
  std::vector<StackFile> files = {in_setup(0), in_setup(1), in_setup(2)};
  Verdict missing = ComputeVerdict(Merge(files, 4));
  EXPECT_EQ(missing.phase, VerdictPhase::kSetup);
  EXPECT_EQ(missing.setup_waiting.Fold(), "0-2");
  EXPECT_EQ(missing.setup_call, "ncclCommInitRank");
  ASSERT_EQ(missing.suspects.size(), 1u);
  EXPECT_EQ(missing.suspects[0].rank, 3);
  auto joined = [](const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  };
  std::string text = joined(missing.summary);
  EXPECT_NE(text.find("wait in ncclCommInitRank (communicator set-up"), std::string::npos) << text;
  EXPECT_NE(text.find("never arrived (no stack file): 3"), std::string::npos) << text;

  files.push_back(
      MakeRank(3, 4, {Py("<module>", "train.py", 160), Py("load_dataset", "train.py", 40)},
               {Native("_start", "/usr/bin/python3.11"), Native("read", "/usr/lib/x86_64-linux-gnu/libc.so.6")}));
  Verdict late = ComputeVerdict(Merge(files, 4));
  EXPECT_EQ(late.phase, VerdictPhase::kSetup);
  ASSERT_EQ(late.suspects.size(), 1u) << VerdictToJson(late);
  EXPECT_EQ(late.suspects[0].rank, 3);
  EXPECT_TRUE(Has(late.suspects[0].kinds, SuspectKind::kNotInSetup));
  text = joined(late.summary);
  EXPECT_NE(text.find("rank 3 is not in it: load_dataset (train.py:40)"), std::string::npos) << text;
  nlohmann::json j = nlohmann::json::parse(VerdictToJson(late));
  EXPECT_EQ(j["phase"], "setup");
  EXPECT_EQ(j["setup"]["waiting"].dump(), "[0,1,2]");

  EXPECT_EQ(ComputeVerdict(Merge(HangOf4())).phase, VerdictPhase::kStep);
}

TEST(Verdict, JsonHasTheDocumentedFields) {
  std::string json = VerdictToJson(ComputeVerdict(Merge(HangOf4())));
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["format"], "xtimer-verdict");
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["ranks_reported"], nlohmann::json({0, 1, 2, 3}));
  EXPECT_EQ(j["ranks_missing"], nlohmann::json::array());
  EXPECT_EQ(j["suspects"][0]["rank"], 2);
  EXPECT_EQ(j["suspects"][0]["frames"][0], "load_batch (train.py:88)");
  EXPECT_EQ(j["groups"][0]["ranks"], nlohmann::json({0, 1, 3}));
  EXPECT_EQ(j["communicators"][0]["absent"], nlohmann::json({2}));
  // The enums' names are the file's words (docs/formats.md).
  EXPECT_EQ(j["phase"], "step");
  EXPECT_EQ(j["groups"][0]["by"], "python");
  EXPECT_EQ(j["suspects"][0]["kinds"], nlohmann::json({"absent", "stack_differs"}));
  // Rank lists stay on one line; objects are indented.
  EXPECT_NE(json.find("\"ranks_reported\": [0,1,2,3],\n"), std::string::npos) << json;
  EXPECT_NE(json.find("\n  \"suspects\": [\n    {\n      \"rank\": 2,"), std::string::npos) << json;
}

TEST(Verdict, JudgingWritesNoText) {
  MergedStacks m = Merge(HangOf4());
  Verdict judged = JudgeStacks(m);
  EXPECT_TRUE(judged.summary.empty());
  ASSERT_EQ(judged.suspects.size(), 1u);
  EXPECT_EQ(judged.suspects[0].rank, 2);
  std::vector<std::string> lines = SummaryLines(judged, m);
  EXPECT_EQ(lines, ComputeVerdict(m).summary);
  EXPECT_EQ(lines.back(), "suspects: rank 2 (absent, stack_differs)");
}

TEST(CallGraph, RendersSeveralGraphsInOneProcess) {
  // The viewer renders py_stack and cpp_stack, the collector one pair per hang: Graphviz must
  // survive many renderings in one process (under AddressSanitizer this caught a use-after-free).
  MergedStacks m = Merge(HangOf4());
  for (int round = 0; round < 3; ++round) {
    for (const StackTree* tree : {&m.python, &m.native}) {
      std::string dot = WriteCallGraphDot(MakeTreeView(m, *tree, {}), {.title = "round " + std::to_string(round)});
      std::string svg, error;
      ASSERT_TRUE(RenderDotToSvg(dot, &svg, &error)) << error;
      EXPECT_NE(svg.find("<svg"), std::string::npos);
      EXPECT_NE(svg.find("round " + std::to_string(round)), std::string::npos);
    }
  }
  std::string svg, error;
  EXPECT_FALSE(RenderDotToSvg("digraph { a -> ", &svg, &error));
  EXPECT_NE(error.find("graphviz"), std::string::npos);
}

}  // namespace
}  // namespace xtimer

namespace xtimer {
namespace {

TEST(RankList, KeepsRanksAsRunsAndSortsThemOnFinish) {
  RankList l;
  EXPECT_TRUE(l.empty());
  for (int32_t r : {0, 0, 1, 2, 2, 3, 7, 8, 5}) l.Add(r);  // a repeat is a second thread of a rank
  RankList other;
  for (int32_t r : {4, 6, 20, 2}) other.Add(r);
  l.Append(other);
  l.Finish();
  EXPECT_EQ(l.ToVector(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 20}));
  EXPECT_EQ(l.size(), 10u);
  EXPECT_EQ(RankSet(l).Fold(), "0-8/20");
  RankList one;
  one.Add(4096);
  one.Finish();
  EXPECT_EQ(one.ToVector(), std::vector<int32_t>{4096});
  EXPECT_EQ(one.size(), 1u);
}

}  // namespace
}  // namespace xtimer

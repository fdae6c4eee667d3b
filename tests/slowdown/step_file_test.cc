// The steps file's compact layout (common/steps/step_file_writer.h, step_json.h): records
// written and read back equal, each string written once, layout-1 lines still read (alone and
// after a layout-2 part), a lost header or dictionary line named once per file and the rest read,
// corrupt and cut lines skipped, fields of the wrong type refused with the field named, strings
// cut, and the compact size itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/steps/step_file_writer.h"
#include "common/steps/step_json.h"
#include "slowdown/steps_folder.h"

namespace xtimer::slowdown {
namespace {

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A step as a rank writes it: times to the µs, 3 collectives, 3 kernel signatures.
StepRecord Step(int64_t n) {
  StepRecord r;
  r.rank = 3;
  r.world = 8;
  r.node = "host-a";
  r.pid = 4242;
  r.step = n;
  r.t_begin = 1764000000.123456 + 1.1 * static_cast<double>(n);
  r.t_end = r.t_begin + 1.111111;
  r.gpu_busy_s = 0.810234;
  r.gpu_idle_s = std::max(0.0, (r.t_end - r.t_begin) - r.gpu_busy_s);
  r.issue_latency_s = 2.1e-05;
  r.kernels = {{"GEMM bf16 4096x4096x4096", 4, 0.400123, 312.125},
               {"void at::native::elementwise_kernel<128, 4>(int, float*)", 40, 0.0500125, 0},
               {"void at::native::reduce_kernel<512, 1>", 3, 3.25e-6, 0}};
  const double b = r.t_begin;
  r.colls = {{"9f3a01c2", 1000 + n, "AllReduce", 67108864, 8, b + 0.9, b + 0.950002, b + 1.100003},
             {"77aa0001", 2000 + n, "AllReduce", 4194304, 4, b + 0.95, b + 1.0, b + 1.01},
             {"5b5b0002", 3000 + n, "AllGather", 1048576, 2, b + 1.0, b + 1.02, b + 1.05}};
  return r;
}

// Fields equal, times to the µs, durations to their 6 significant digits.
void ExpectSame(const StepRecord& got, const StepRecord& want) {
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.world, want.world);
  EXPECT_EQ(got.node, want.node);
  EXPECT_EQ(got.pid, want.pid);
  EXPECT_EQ(got.step, want.step);
  EXPECT_DOUBLE_EQ(got.t_begin, want.t_begin);
  EXPECT_DOUBLE_EQ(got.t_end, want.t_end);
  EXPECT_NEAR(got.gpu_busy_s, want.gpu_busy_s, 1e-6 * want.gpu_busy_s + 1e-12);
  EXPECT_NEAR(got.gpu_idle_s, want.gpu_idle_s, 1.5e-6);
  EXPECT_NEAR(got.issue_latency_s, want.issue_latency_s, 1e-12);
  EXPECT_NEAR(got.gc_s, want.gc_s, 1e-6 * want.gc_s + 1e-12);
  EXPECT_NEAR(got.data_s, want.data_s, 1e-6 * want.data_s + 1e-12);
  ASSERT_EQ(got.kernels.size(), want.kernels.size());
  for (size_t i = 0; i < got.kernels.size(); ++i) {
    EXPECT_EQ(got.kernels[i].sig, want.kernels[i].sig);
    EXPECT_EQ(got.kernels[i].n, want.kernels[i].n);
    EXPECT_NEAR(got.kernels[i].s, want.kernels[i].s, 1e-6 * want.kernels[i].s);
    EXPECT_NEAR(got.kernels[i].tflops, want.kernels[i].tflops, 1e-5 * want.kernels[i].tflops);
  }
  ASSERT_EQ(got.colls.size(), want.colls.size());
  for (size_t i = 0; i < got.colls.size(); ++i) {
    const CollTime &g = got.colls[i], &w = want.colls[i];
    EXPECT_EQ(g.comm, w.comm);
    EXPECT_EQ(g.seq, w.seq);
    EXPECT_EQ(g.op, w.op);
    EXPECT_EQ(g.bytes, w.bytes);
    EXPECT_EQ(g.ranks, w.ranks);
    EXPECT_DOUBLE_EQ(g.call, w.call);
    EXPECT_DOUBLE_EQ(g.start, w.start);
    EXPECT_DOUBLE_EQ(g.end, w.end);
  }
  ASSERT_EQ(got.samples.size(), want.samples.size());
  for (size_t i = 0; i < got.samples.size(); ++i) {
    EXPECT_EQ(got.samples[i].frames, want.samples[i].frames);
    EXPECT_EQ(got.samples[i].n, want.samples[i].n);
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Reads lines in order; the records, and every line's outcome.
struct Read {
  std::vector<StepRecord> records;
  std::vector<StepFileReader::Line> kinds;
  std::vector<std::string> whys;
};
Read ReadAll(const std::vector<std::string>& lines) {
  Read out;
  StepFileReader reader;
  for (const std::string& line : lines) {
    StepRecord r;
    std::string why;
    out.kinds.push_back(reader.Take(line, &r, &why));
    out.whys.push_back(why);
    if (out.kinds.back() == StepFileReader::Line::kRecord) out.records.push_back(std::move(r));
  }
  return out;
}

TEST(StepFile, WrittenAndReadBackEqual) {
  std::vector<StepRecord> want;
  for (int n = 0; n < 4; ++n) want.push_back(Step(n));
  // Unknown values, samples, GC and DataLoader time, an idle time that is not length less busy.
  want[1].issue_latency_s = kNaN;
  want[1].colls[2].start = want[1].colls[2].end = kNaN;
  want[2].gc_s = 0.0123456;
  want[2].data_s = 0.25;
  want[2].gpu_idle_s = 0.1;
  want[3].samples = {{"load_batch (train.py:40);main (train.py:88)", 12}, {"main (train.py:90)", 3}};
  std::string text;
  StepFileWriter writer;
  for (const StepRecord& r : want) writer.Append(r, &text);
  Read got = ReadAll(Lines(text));
  ASSERT_EQ(got.records.size(), want.size()) << text;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    StepRecord expect = want[i];
    std::string why;
    ASSERT_TRUE(CheckStepRecord(&expect, &why))
        << why;  // what layout 1 reads: unknown latency 0, no untimed collective
    ExpectSame(got.records[i], expect);
  }
  // The same records in layout 1 (the agent's messages) read the same.
  for (size_t i = 0; i < want.size(); ++i) {
    StepRecord v1;
    std::string why;
    ASSERT_TRUE(ParseStepLine(StepRecordV1Json(want[i]), &v1, &why)) << why;
    ExpectSame(v1, got.records[i]);
  }
}

TEST(StepFile, EachStringIsWrittenOnceAndAStepIsCompact) {
  std::string text;
  StepFileWriter writer;
  for (int n = 0; n < 3; ++n) writer.Append(Step(n), &text);
  std::vector<std::string> lines = Lines(text);
  // A header, the signatures, the collectives, then one line per step.
  ASSERT_EQ(lines.size(), 6u) << text;
  EXPECT_EQ(lines[0], R"({"v":2,"rank":3,"world":8,"node":"host-a","pid":4242,"t0":1764000000})");
  EXPECT_EQ(lines[1].rfind(R"({"d":"sig","i":0,"add":["GEMM bf16 4096x4096x4096",)", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2], R"({"d":"coll","i":0,"add":[["9f3a01c2","AllReduce",67108864,8],)"
                      R"(["77aa0001","AllReduce",4194304,4],["5b5b0002","AllGather",1048576,2]]})");
  EXPECT_EQ(lines[3],
            R"({"step":0,"t":123456,"len":1111111,"busy":810234,"lat":21,)"
            R"("k":[[0,4,400123,312.125],[1,40,50012.5],[2,3,3.25]],)"
            R"("c":[[0,1000,900000,50002,150001],[1,2000,950000,50000,10000],[2,3000,1000000,20000,30000]]})");
  // A new string later: one dictionary line with its index.
  StepRecord r = Step(3);
  r.kernels[1].sig = "softmax_kernel";
  std::string more;
  writer.Append(r, &more);
  EXPECT_EQ(Lines(more)[0], R"({"d":"sig","i":3,"add":["softmax_kernel"]})");
  // Layout 1 of the same step, as the file was written before, and this one.
  const size_t v1 = StepRecordV1Json(Step(1)).size() + 1, v2 = lines[4].size() + 1;
  std::printf("a step with 3 collectives and 3 kernel signatures: %zu bytes in layout 1, %zu in layout 2\n", v1, v2);
  EXPECT_LE(v2, 300u);
  EXPECT_LT(v2 * 5, v1 * 2);
}

TEST(StepFile, LayoutOneLinesStillRead) {
  const std::string v1 = StepRecordV1Json(Step(7));
  std::string v2;
  StepFileWriter writer;
  writer.Append(Step(8), &v2);
  // An old file, and a rank restarted with the newer library appending to it; and the reverse.
  Read got = ReadAll({v1, v1, Lines(v2)[0], Lines(v2)[1], Lines(v2)[2], Lines(v2)[3], v1});
  ASSERT_EQ(got.records.size(), 4u);
  EXPECT_EQ(got.records[0].step, 7);
  EXPECT_EQ(got.records[2].step, 8);
  EXPECT_EQ(got.records[3].step, 7);
  ExpectSame(got.records[3], got.records[0]);
  EXPECT_EQ(got.records[0].colls.size(), 3u);
  // A layout-1 record claiming another version is refused, naming it.
  std::string v3 = v1;
  v3.replace(v3.find(R"("v":1)"), 5, R"("v":3)");
  EXPECT_EQ(ReadAll({v3}).kinds[0], StepFileReader::Line::kBad);
  EXPECT_NE(ReadAll({v3}).whys[0].find("version 3"), std::string::npos);
}

TEST(StepFile, AMissingDictionaryLineIsNamedAndTheRestRead) {
  std::string text;
  StepFileWriter writer;
  for (int n = 0; n < 3; ++n) writer.Append(Step(n), &text);
  StepRecord r = Step(3);
  r.kernels[1].sig = "softmax_kernel";  // a new signature, index 3
  writer.Append(r, &text);
  writer.Append(Step(4), &text);  // uses the first three only
  std::vector<std::string> lines = Lines(text);
  ASSERT_EQ(lines.size(), 9u);
  ASSERT_EQ(lines[6].rfind(R"({"d":"sig","i":3)", 0), 0u);
  lines.erase(lines.begin() + 6);
  Read got = ReadAll(lines);
  EXPECT_EQ(got.kinds[6], StepFileReader::Line::kUnresolved);
  EXPECT_EQ(got.whys[6],
            "kernel signature 3 is in no dictionary line before it (the file's start or a dictionary line is missing)");
  ASSERT_EQ(got.records.size(), 4u);
  EXPECT_EQ(got.records.back().step, 4);

  // The file's start cut off: steps before the next header are named once, the rest read.
  std::string dir = (fs::temp_directory_path() / "xtimer-step-file-XXXXXX").string();
  dir = mkdtemp(dir.data());
  const std::string path = dir + "/3-8.steps.jsonl";
  {
    std::ofstream f(path);
    for (size_t i = 3; i < lines.size(); ++i) f << lines[i] << "\n";  // header and dictionary lost
    std::string again;
    writer.Reset();  // another process appends
    writer.Append(Step(5), &again);
    f << again;
  }
  StepsInput in;
  ASSERT_TRUE(ReadStepsFile(path, {}, &in));
  ASSERT_EQ(in.records.size(), 1u);
  EXPECT_EQ(in.records[0].step, 5);
  EXPECT_EQ(in.bad_lines, 5u);
  ASSERT_EQ(in.problems.size(), 2u);
  EXPECT_EQ(in.problems[0], path +
                                ":1: a step line before any header line (the file's start or a dictionary line is "
                                "missing); this line and every other such line of the file skipped");
  EXPECT_EQ(in.problems[1], path + ": 5 lines skipped in all for a missing header or dictionary line");
  fs::remove_all(dir);
}

TEST(StepFile, CorruptAndCutLinesAreSkipped) {
  std::string text;
  StepFileWriter writer;
  for (int n = 0; n < 3; ++n) writer.Append(Step(n), &text);
  std::vector<std::string> lines = Lines(text);
  lines[4] = lines[4].substr(0, lines[4].size() / 2);  // cut short
  lines.push_back(lines[5].substr(0, 40));             // the last line, cut by a crash
  lines.insert(lines.begin() + 2, "#garbage");
  Read got = ReadAll(lines);
  ASSERT_EQ(got.records.size(), 2u);
  EXPECT_EQ(got.records[0].step, 0);
  EXPECT_EQ(got.records[1].step, 2);
  EXPECT_EQ(got.kinds[2], StepFileReader::Line::kBad);
  EXPECT_EQ(got.whys[5], "not JSON (a truncated or corrupt line)");
  EXPECT_EQ(got.kinds.back(), StepFileReader::Line::kBad);
}

TEST(StepFile, WrongTypesAreRefusedNamingTheField) {
  std::string text;
  StepFileWriter writer;
  writer.Append(Step(0), &text);
  const std::vector<std::string> lines = Lines(text);
  struct Case {
    size_t line;
    std::string from, to, expect;
  };
  const Case cases[] = {
      {0, R"("rank":3)", R"("rank":3.5)", "\"rank\" is not an integer"},
      {0, R"("t0":1764000000)", R"("t0":"now")", "\"t0\" is not an integer"},
      {1, R"("i":0)", R"("i":-1)", "\"i\" is out of range"},
      {1, R"("GEMM bf16 4096x4096x4096")", "17", "\"add\": \"sig\" is not a string"},
      {2, R"(67108864,8])", R"(67108864,"8"])", "\"add\": \"ranks\" is not an integer"},
      {2, R"("add":[)", R"("add":7,"x":[)", "\"add\" is not an array"},
      {3, R"("step":0)", R"("step":"0")", "\"step\" is not an integer"},
      {3, R"("t":123456)", R"("t":123456.5)", "\"t\" is not an integer"},
      {3, R"("busy":810234)", R"("busy":"all")", "\"busy\" is not a number"},
      {3, R"([0,1000,)", R"([0,1000.5,)", "\"c\": \"seq\" is not an integer"},
      {3, R"([0,1000,900000,50002,150001])", R"([0,1000,900000,50002])", "\"c\": no \"end\""},
      {3, R"([0,4,400123,312.125])", R"([0,-4,400123,312.125])", "\"k\": \"n\" is out of range"},
      {3, R"("k":[[0,)", R"("k":[{},[0,)", "\"k\": an element of \"k\" is not an array"},
      {3, R"("len":1111111)", R"("len":-1)", "t_begin/t_end"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> edited = lines;
    size_t at = edited[c.line].find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    edited[c.line].replace(at, c.from.size(), c.to);
    Read got = ReadAll(edited);
    EXPECT_EQ(got.kinds[c.line], StepFileReader::Line::kBad) << c.to;
    EXPECT_EQ(got.whys[c.line].find(c.expect), 0u) << c.to << ": " << got.whys[c.line];
    EXPECT_TRUE(got.records.empty()) << c.to;  // a bad header or dictionary line costs its step too
  }
  // Strings are cut and cleaned as in layout 1.
  StepRecord r = Step(0);
  r.node = std::string("bad\x1b[2Jnode\xff", 12);
  r.kernels[0].sig = std::string(1000, 'g');
  std::string odd;
  StepFileWriter().Append(r, &odd);
  Read got = ReadAll(Lines(odd));
  ASSERT_EQ(got.records.size(), 1u);
  EXPECT_EQ(got.records[0].node, "bad?[2Jnode?");
  EXPECT_EQ(got.records[0].kernels[0].sig, std::string(StepLimits::kMaxSig, 'g'));
}

TEST(StepFile, AFullDictionaryStartsAgainWithAHeader) {
  std::string text;
  StepFileWriter writer;
  std::vector<StepRecord> want;
  for (size_t n = 0; n < StepFileWriter::kMaxEntries + 10; ++n) {
    StepRecord r = Step(static_cast<int64_t>(n));
    r.kernels.resize(1);
    r.kernels[0].sig = "kernel_" + std::to_string(n);  // a new signature every step
    writer.Append(r, &text);
    want.push_back(r);
  }
  std::vector<std::string> lines = Lines(text);
  size_t headers = 0;
  for (const std::string& line : lines) headers += line.rfind(R"({"v":2,)", 0) == 0;
  EXPECT_EQ(headers, 2u);
  Read got = ReadAll(lines);
  ASSERT_EQ(got.records.size(), want.size());
  EXPECT_EQ(got.records.back().kernels[0].sig, want.back().kernels[0].sig);
  EXPECT_EQ(got.records[StepFileWriter::kMaxEntries].kernels[0].sig, want[StepFileWriter::kMaxEntries].kernels[0].sig);
}

}  // namespace
}  // namespace xtimer::slowdown

// xtimer_slowdown on steps files written from simulated jobs (synthetic_job.h): the same judgement
// as live (the right rank and cause, nothing else; node1's clock 3 s ahead), slowdown.json with its
// episodes, an SVG, and bad input named by file and line without losing the rest: a corrupt line, a
// line cut short at the end of a file, a line over 1 MiB, a FIFO, a rank without a file, a step
// years ahead of the rest, years of empty time between two parts of a job, a rank whose clock is a
// year off, the same rank in two files and one rank on two nodes. Every run of the program is
// bounded (`timeout`): a regression that stalls fails as that, and nothing asserts elapsed time.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/steps/step_file_writer.h"
#include "common/steps/step_json.h"
#include "slowdown/steps_folder.h"
#include "tests/slowdown/synthetic_job.h"

namespace xtimer::slowdown {
namespace {

namespace fs = std::filesystem;
using sim::Injection;
using sim::JobConfig;
using sim::SyntheticJob;

class OfflineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "xtimer-slowdown-offline-XXXXXX").string();
    dir_ = mkdtemp(t.data());
  }
  void TearDown() override { fs::remove_all(dir_); }

  enum class Layout { kJson, kV1, kV2 };
  // Writes each rank's records of `seconds` of the job as <rank>-<world>.steps.jsonl: nlohmann's
  // JSON, layout 1 as ranks wrote it (times to the µs, 6 digits), or the compact layout 2.
  void WriteJob(JobConfig c, double seconds, std::set<int> skip = {}, Layout layout = Layout::kJson,
                const std::string& sub = "") {
    SyntheticJob job(c);
    const std::string dir = dir_ + sub;
    fs::create_directories(dir);
    std::map<int, std::ofstream> files;
    std::map<int, StepFileWriter> writers;
    for (int r = 0; r < job.world(); ++r)
      if (!skip.contains(r))
        files[r].open(dir + "/" + std::to_string(r) + "-" + std::to_string(job.world()) + ".steps.jsonl");
    while (job.now() < c.start + seconds)
      for (auto& [end, rec] : job.Step()) {
        if (!files.contains(rec.rank)) continue;
        std::string text;
        if (layout == Layout::kJson) text = StepRecordToJson(rec).dump() + "\n";
        if (layout == Layout::kV1) text = StepRecordV1Json(rec) + "\n";
        if (layout == Layout::kV2) writers[rec.rank].Append(rec, &text);
        files[rec.rank] << text;
      }
  }

  // Runs the command (killed after kTimeoutS: 124, a stall); its exit status, stdout and stderr.
  static constexpr int kTimeoutS = 120;
  int Run(const std::string& args, std::string* out, std::string* err) {
    std::string o = dir_ + "/.stdout", e = dir_ + "/.stderr";
    int rc = std::system(("timeout -k 5 " + std::to_string(kTimeoutS) + " " + std::string(XTIMER_SLOWDOWN_BIN) + " " +
                          args + " >" + o + " 2>" + e)
                             .c_str());
    *out = Read(o);
    *err = Read(e);
    int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    EXPECT_NE(status, 124) << "xtimer_slowdown " << args << " ran past " << kTimeoutS << " s and was stopped";
    return status;
  }
  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  static void WriteLines(const std::string& path, const std::vector<std::string>& lines) {
    std::ofstream f(path);
    for (const std::string& l : lines) f << l << "\n";
  }
  // slowdown.json without the time it was written.
  nlohmann::json VerdictOf(const std::string& dir) {
    nlohmann::json j = nlohmann::json::parse(Read(dir + "/slowdown.json"));
    j.erase("updated");
    return j;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
};

TEST_F(OfflineTest, FindsTheSlowGpuAsLiveAndDrawsIt) {
  JobConfig c;
  c.clock_offset = {0, 3.0};
  c.injections = {{Injection::kSlowGpu, 6, 2.0, 40, 70}};
  WriteJob(c, 100);
  std::string out, err;
  ASSERT_EQ(Run("--path " + dir_ + " --out " + dir_ + "/result", &out, &err), 0) << err;
  EXPECT_EQ(err, "") << "nothing wrong with these files";
  EXPECT_NE(out.find("slowdown: rank 6 (node node1) is slow since"), std::string::npos) << out;
  EXPECT_NE(out.find("slowdown over: rank 6 (node node1), gpu_compute, after"), std::string::npos) << out;
  EXPECT_NE(out.find("1 slowdown in "), std::string::npos) << out;

  nlohmann::json j = nlohmann::json::parse(Read(dir_ + "/result/slowdown.json"));
  ASSERT_EQ(j["episodes"].size(), 1u) << j.dump();
  const nlohmann::json& e = j["episodes"][0];
  EXPECT_EQ(e["rank"], 6);
  EXPECT_EQ(e["cause"], "gpu_compute");
  EXPECT_EQ(e["scope"], "rank");
  EXPECT_TRUE(e["ended"]);
  EXPECT_NEAR(e["since"].get<double>(), c.start + 40, 1.5) << "on rank 0's node's clock";
  EXPECT_NEAR(e["duration_s"].get<double>(), 30, 6);
  EXPECT_GT(e["cost_s"].get<double>(), 5);
  EXPECT_TRUE(j["slow"].empty()) << "over at the end of the files";
  EXPECT_EQ(j["ranks"].size(), 8u);

  std::string svg = Read(dir_ + "/result/slowdown.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("rank 6 gpu_compute"), std::string::npos) << "the onset is labelled";
  EXPECT_NE(svg.find("<title>rank 6 (node1)</title>"), std::string::npos) << "rank 6 has lines of its own";
  EXPECT_EQ(svg.find("<title>rank 5 "), std::string::npos) << "a healthy rank is in the band, not a line";
  EXPECT_NE(svg.find("threshold 0.85"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST_F(OfflineTest, HealthyFilesNameNothing) {
  JobConfig c;
  c.checkpoint_every = 50;
  WriteJob(c, 80);
  std::string out, err;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  nlohmann::json j = nlohmann::json::parse(Read(dir_ + "/slowdown.json"));
  EXPECT_TRUE(j["episodes"].empty()) << j.dump();
  EXPECT_TRUE(j["slow"].empty());
  EXPECT_NE(out.find("0 slowdowns in "), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ + "/slowdown.svg"));
}

TEST_F(OfflineTest, BadInputIsNamedByFileAndLineAndTheRestIsJudged) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 2, 2.0, 30}};
  WriteJob(c, 70, /*skip=*/{7});
  {
    // A corrupt line in the middle, a field of the wrong type, and a last line cut short.
    std::string path = dir_ + "/1-8.steps.jsonl";
    std::string text = Read(path);
    size_t third = text.find('\n', text.find('\n', text.find('\n') + 1) + 1);
    text.insert(third + 1, "{\"v\": 1, \"rank\": \"one\"}\n#garbage\n");
    text += text.substr(0, 120);
    std::ofstream(path) << text;
  }
  std::ofstream(dir_ + "/3-8.steps.jsonl", std::ios::app) << std::string(1 << 21, 'x') << "\n";
  ASSERT_EQ(mkfifo((dir_ + "/9-16.steps.jsonl").c_str(), 0600), 0);
  std::string out, err;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  EXPECT_NE(err.find("1-8.steps.jsonl:4: \"rank\" is not an integer; line skipped"), std::string::npos) << err;
  EXPECT_NE(err.find("1-8.steps.jsonl:5: not JSON (a truncated or corrupt line); line skipped"), std::string::npos)
      << err;
  EXPECT_NE(err.find("not JSON (a truncated or corrupt line); line skipped"), std::string::npos) << err;
  EXPECT_NE(err.find("3-8.steps.jsonl:"), std::string::npos) << err;
  EXPECT_NE(err.find("a line longer than 1 MiB"), std::string::npos) << err;
  EXPECT_NE(err.find("9-16.steps.jsonl: is a FIFO"), std::string::npos) << err;
  EXPECT_NE(err.find("no records of rank 7 of 8"), std::string::npos) << err;
  for (const std::string& line : {std::string("xtimer_slowdown: ")})
    EXPECT_EQ(err.rfind(line, 0), 0u) << "every line names the tool";
  nlohmann::json j = nlohmann::json::parse(Read(dir_ + "/slowdown.json"));
  ASSERT_EQ(j["episodes"].size(), 1u) << j.dump();
  EXPECT_EQ(j["episodes"][0]["rank"], 2);
  EXPECT_EQ(j["episodes"][0]["cause"], "gpu_compute");
}

// Numbers within a millionth (durations keep 6 digits in both layouts), everything else equal.
void ExpectAlike(const nlohmann::json& a, const nlohmann::json& b, const std::string& where) {
  if (a.is_number() && b.is_number()) {
    EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-6 * std::abs(b.get<double>()) + 1e-6) << where;
  } else if (a.is_object() && b.is_object()) {
    EXPECT_EQ(a.size(), b.size()) << where;
    for (auto it = b.begin(); it != b.end(); ++it)
      if (a.contains(it.key())) ExpectAlike(a[it.key()], it.value(), where + "." + it.key());
  } else if (a.is_array() && b.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i) ExpectAlike(a[i], b[i], where + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

TEST_F(OfflineTest, TheCompactLayoutIsJudgedAsLayoutOne) {
  JobConfig c;
  c.clock_offset = {0, 2.0};
  c.checkpoint_every = 50;
  c.spike_p = 0.002;
  c.injections = {{Injection::kSlowGpu, 6, 2.0, 30, 50},
                  {Injection::kSlowNode, 1, 3.0, 70, 90},
                  {Injection::kGc, 2, 0.06, 110, 130}};
  WriteJob(c, 150, {}, Layout::kV1, "/v1");
  WriteJob(c, 150, {}, Layout::kV2, "/v2");
  std::uintmax_t v1 = 0, v2 = 0;
  for (const auto& f : fs::directory_iterator(dir_ + "/v1")) v1 += f.file_size();
  for (const auto& f : fs::directory_iterator(dir_ + "/v2")) v2 += f.file_size();
  EXPECT_LT(v2 * 3, v1) << "layout 2 is a third of layout 1 or less";
  std::string out1, err1, out2, err2;
  ASSERT_EQ(Run("--path " + dir_ + "/v1", &out1, &err1), 0) << err1;
  ASSERT_EQ(Run("--path " + dir_ + "/v2", &out2, &err2), 0) << err2;
  EXPECT_EQ(err2, "");
  nlohmann::json j1 = nlohmann::json::parse(Read(dir_ + "/v1/slowdown.json"));
  nlohmann::json j2 = nlohmann::json::parse(Read(dir_ + "/v2/slowdown.json"));
  ASSERT_EQ(j1["episodes"].size(), 3u) << j1["episodes"].dump();
  j1.erase("updated");
  j2.erase("updated");
  ExpectAlike(j2, j1, "slowdown.json");
}

// A corrupt step time: rank 0's second step 2283 years after its file's t0. It is named with its
// file, line and rank and skipped; the rest is judged (the slow GPU found) and the run ends.
TEST_F(OfflineTest, AStepYearsAwayIsNamedAndSkipped) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 6, 2.0, 30}};
  WriteJob(c, 70, {}, Layout::kV2);
  const std::string path = dir_ + "/0-8.steps.jsonl";
  std::vector<std::string> lines = Lines(Read(path));
  size_t steps = 0, line = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind("{\"step\":", 0) == 0 && ++steps == 2) line = i;
  ASSERT_GT(line, 0u);
  const size_t t = lines[line].find(",\"t\":"), comma = lines[line].find(',', t + 5);
  lines[line] = lines[line].substr(0, t) + ",\"t\":72057594037927935" + lines[line].substr(comma);
  WriteLines(path, lines);
  size_t all = 0;
  for (const auto& f : fs::directory_iterator(dir_))
    for (const std::string& l : Lines(Read(f.path())))
      if (l.rfind("{\"step\":", 0) == 0) ++all;

  std::string out, err;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  const size_t t0_at = lines[0].find("\"t0\":") + 5;
  const int64_t t0 = std::stoll(lines[0].substr(t0_at, lines[0].find('}', t0_at) - t0_at));
  char when[48];
  std::snprintf(when, sizeof when, "%.3f", static_cast<double>(t0 * 1000000 + 72057594037927935) / 1e6);
  EXPECT_EQ(err, "xtimer_slowdown: " + path + ":" + std::to_string(line + 1) + ": rank 0's step 1 begins at " + when +
                     " (Unix seconds), more than a day from every other step of rank 0 in this file; line skipped\n")
      << "one line naming the file, the line and the rank";
  EXPECT_NE(out.find(" in " + std::to_string(all - 1) + " steps of 8 ranks"), std::string::npos)
      << "every other step judged: " << out;
  nlohmann::json j = VerdictOf(dir_);
  ASSERT_EQ(j["episodes"].size(), 1u) << j["episodes"].dump();
  EXPECT_EQ(j["episodes"][0]["rank"], 6);
  EXPECT_EQ(j["episodes"][0]["cause"], "gpu_compute");
}

// Two parts of one job 2000 years apart (every rank's file holds both; each part is many steps,
// so none is alone): the empty time between them is skipped, not judged every 2 s, and each part
// is judged as if alone.
TEST_F(OfflineTest, YearsOfEmptyTimeBetweenPartsAreSkipped) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 6, 2.0, 30}};
  WriteJob(c, 60, {}, Layout::kJson, "/alone");
  WriteJob(c, 60);
  c.start += 2000 * 365.25 * 86400;
  WriteJob(c, 60, {}, Layout::kJson, "/later");
  for (const auto& f : fs::directory_iterator(dir_ + "/later"))
    std::ofstream(dir_ + "/" + f.path().filename().string(), std::ios::app) << Read(f.path());
  fs::remove_all(dir_ + "/later");

  std::string out, err, out_alone, err_alone;
  ASSERT_EQ(Run("--path " + dir_ + "/alone", &out_alone, &err_alone), 0) << err_alone;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  EXPECT_EQ(err, "");
  nlohmann::json alone = VerdictOf(dir_ + "/alone"), both = VerdictOf(dir_);
  ASSERT_EQ(alone["episodes"].size(), 1u) << alone["episodes"].dump();
  ASSERT_EQ(both["episodes"].size(), 2u) << "the slow GPU in each part: " << both["episodes"].dump();
  for (const nlohmann::json& e : both["episodes"]) {
    EXPECT_EQ(e["rank"], 6);
    EXPECT_EQ(e["cause"], "gpu_compute");
  }
  EXPECT_NEAR(both["episodes"][0]["since"].get<double>(), alone["episodes"][0]["since"].get<double>(), 1e-3);
  EXPECT_NEAR(both["episodes"][1]["since"].get<double>() - both["episodes"][0]["since"].get<double>(),
              2000 * 365.25 * 86400, 2);
  std::string steps = out_alone.substr(out_alone.find(" in ") + 4);
  EXPECT_NE(out.find("2 slowdowns in " + std::to_string(2 * std::stoul(steps)) + " steps of 8 ranks"),
            std::string::npos)
      << out << " against " << out_alone;
}

// Rank 1's clock a year ahead (its file's t0): named in one line with the offset, its times moved
// onto its node's clock; the slow GPU of rank 3 is still found, and nothing else.
TEST_F(OfflineTest, ARankWhoseClockIsAYearOffIsNamedAndTheSlowRankStillFound) {
  JobConfig c;
  c.clock_offset = {0, 3.0};
  c.injections = {{Injection::kSlowGpu, 3, 2.0, 40, 80}};
  WriteJob(c, 100, {}, Layout::kV2, "/clean");
  WriteJob(c, 100, {}, Layout::kV2);
  const std::string path = dir_ + "/1-8.steps.jsonl";
  std::vector<std::string> lines = Lines(Read(path));
  ASSERT_EQ(lines[0].rfind("{\"v\":2,", 0), 0u) << lines[0];
  const size_t t0 = lines[0].find("\"t0\":") + 5, end = lines[0].find('}', t0);
  lines[0] = lines[0].substr(0, t0) + std::to_string(std::stoll(lines[0].substr(t0, end - t0)) + 365 * 86400) +
             lines[0].substr(end);
  WriteLines(path, lines);

  std::string out, err;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  EXPECT_EQ(err,
            "xtimer_slowdown: the clock of rank 1 (node node0) is 365.0 days ahead of its node's other ranks' (from "
            "the collectives they share); its times are moved by that much and it is judged with the others\n");
  nlohmann::json j = VerdictOf(dir_);
  ASSERT_EQ(j["episodes"].size(), 1u) << j["episodes"].dump();
  EXPECT_EQ(j["episodes"][0]["rank"], 3);
  EXPECT_EQ(j["episodes"][0]["cause"], "gpu_compute");
  EXPECT_TRUE(j["episodes"][0]["ended"]);
  std::string clean_out, clean_err;
  ASSERT_EQ(Run("--path " + dir_ + "/clean", &clean_out, &clean_err), 0) << clean_err;
  nlohmann::json clean = VerdictOf(dir_ + "/clean");
  EXPECT_NEAR(j["episodes"][0]["since"].get<double>(), clean["episodes"][0]["since"].get<double>(), 0.5);
  EXPECT_EQ(j["ranks"].size(), 8u) << "rank 1 is judged with the others";
}

// A whole node 2 hours ahead: named in one line (its ranks, the offset) and judged as if its
// clock were right. A rank a year ahead whose steps carry no collective (nothing tells its clock):
// named, left on its own clock; the slow rank is still found.
TEST_F(OfflineTest, AFarNodeAndAnUnlinkedRankAreNamed) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 3, 2.0, 40, 80}};
  WriteJob(c, 100, {}, Layout::kV2, "/clean");
  c.clock_offset = {0, 7200};
  WriteJob(c, 100, {}, Layout::kV2, "/node");
  c.clock_offset = {};
  WriteJob(c, 100, {}, Layout::kV2, "/rank");
  const std::string path = dir_ + "/rank/1-8.steps.jsonl";
  std::vector<std::string> lines = Lines(Read(path));
  for (std::string& l : lines) {
    nlohmann::json j = nlohmann::json::parse(l);
    if (j.contains("t0")) j["t0"] = j["t0"].get<int64_t>() + 365 * 86400;
    j.erase("c");
    l = j.dump();
  }
  WriteLines(path, lines);

  std::string out, err, clean_out, clean_err;
  ASSERT_EQ(Run("--path " + dir_ + "/clean", &clean_out, &clean_err), 0) << clean_err;
  const nlohmann::json clean = VerdictOf(dir_ + "/clean");
  ASSERT_EQ(clean["episodes"].size(), 1u) << clean["episodes"].dump();
  ASSERT_EQ(Run("--path " + dir_ + "/node", &out, &err), 0) << err;
  EXPECT_EQ(err,
            "xtimer_slowdown: the clock of node node1 (ranks 4-7) is 2.0 hours ahead of node node0's (rank 0's, from "
            "the collectives they share); its times are moved by that much\n");
  nlohmann::json j = VerdictOf(dir_ + "/node");
  ASSERT_EQ(j["episodes"].size(), 1u) << j["episodes"].dump();
  EXPECT_EQ(j["episodes"][0]["rank"], 3);
  EXPECT_NEAR(j["episodes"][0]["since"].get<double>(), clean["episodes"][0]["since"].get<double>(), 0.5);

  ASSERT_EQ(Run("--path " + dir_ + "/rank", &out, &err), 0) << err;
  EXPECT_EQ(err,
            "xtimer_slowdown: the steps of rank 1 (node node0) are 365.0 days ahead of the others' and no collective "
            "they share tells its clock; judged on its own clock, apart from them\n");
  j = VerdictOf(dir_ + "/rank");
  ASSERT_FALSE(j["episodes"].empty());
  EXPECT_EQ(j["episodes"][0]["rank"], 3);
  EXPECT_EQ(j["episodes"][0]["cause"], "gpu_compute");
}

// A copy of rank 3's file, cut to its first half, beside it: named in one line with both files;
// the whole file kept (more steps), so the verdict is the one without the copy.
TEST_F(OfflineTest, TheSameRankInTwoFilesIsNamedAndOneKept) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 6, 2.0, 30}};
  WriteJob(c, 60, {}, Layout::kV2, "/clean");
  WriteJob(c, 60, {}, Layout::kV2);
  std::vector<std::string> lines = Lines(Read(dir_ + "/3-8.steps.jsonl"));
  const size_t half = lines.size() / 2;
  lines.resize(half);
  WriteLines(dir_ + "/3-8.copy.steps.jsonl", lines);  // first by name

  std::string out, err, clean_out, clean_err;
  ASSERT_EQ(Run("--path " + dir_ + "/clean", &clean_out, &clean_err), 0) << clean_err;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  const std::vector<std::string> errs = Lines(err);
  ASSERT_EQ(errs.size(), 1u) << err;
  EXPECT_EQ(errs[0].rfind(
                "xtimer_slowdown: rank 3 is in two files at the same time: " + dir_ + "/3-8.steps.jsonl (lines 4-", 0),
            0u)
      << err;
  EXPECT_NE(errs[0].find(" and " + dir_ + "/3-8.copy.steps.jsonl (lines 4-"), std::string::npos) << err;
  EXPECT_NE(errs[0].find("; kept the first (more steps), the second's steps skipped"), std::string::npos) << err;
  auto steps = [](const std::string& o) { return o.substr(o.find(" in "), o.find(" ranks") - o.find(" in ")); };
  EXPECT_EQ(steps(out), steps(clean_out)) << "as many steps judged as without the copy";
  EXPECT_EQ(VerdictOf(dir_), VerdictOf(dir_ + "/clean"));
}

// Rank 5's steps twice in its file, the second time from node0 (a second process given rank 5 on
// another node): named in one line; as many steps each, so the first in the file (node1) is kept.
TEST_F(OfflineTest, ARankOnTwoNodesIsNamedAndOneKept) {
  JobConfig c;
  c.injections = {{Injection::kSlowGpu, 6, 2.0, 30}};
  WriteJob(c, 60, {}, Layout::kJson, "/clean");
  WriteJob(c, 60);
  const std::string path = dir_ + "/5-8.steps.jsonl";
  std::vector<std::string> lines = Lines(Read(path));
  const size_t n = lines.size();
  for (size_t i = 0; i < n; ++i) {
    std::string l = lines[i];
    const size_t at = l.find("\"node\":\"node1\"");
    ASSERT_NE(at, std::string::npos) << l;
    lines.push_back(l.replace(at, 14, "\"node\":\"node0\""));
  }
  WriteLines(path, lines);

  std::string out, err, clean_out, clean_err;
  ASSERT_EQ(Run("--path " + dir_ + "/clean", &clean_out, &clean_err), 0) << clean_err;
  ASSERT_EQ(Run("--path " + dir_, &out, &err), 0) << err;
  EXPECT_EQ(err, "xtimer_slowdown: rank 5 claims two nodes at the same time: " + path + " (lines 1-" +
                     std::to_string(n) + ": " + std::to_string(n) + " steps of node node1, pid 1005) and " + path +
                     " (lines " + std::to_string(n + 1) + "-" + std::to_string(2 * n) + ": " + std::to_string(n) +
                     " steps of node node0, pid 1005); kept the first (as many steps, first by file name and line), "
                     "the second's steps skipped\n");
  nlohmann::json j = VerdictOf(dir_);
  EXPECT_EQ(j, VerdictOf(dir_ + "/clean"));
  for (const nlohmann::json& r : j["ranks"])
    if (r["rank"] == 5) {
      EXPECT_EQ(r["node"], "node1");
    }
}

TEST_F(OfflineTest, NothingToReadIsOneLineAndExitTwo) {
  std::string out, err;
  EXPECT_EQ(Run("--path " + dir_, &out, &err), 2);
  EXPECT_EQ(err, "xtimer_slowdown: no steps files (*.steps.jsonl) in " + dir_ +
                     " (the ranks write <rank>-<world>.steps.jsonl into XTIMER_TIMELINE_PATH)\n");
  EXPECT_EQ(Run("--path " + dir_ + "/missing", &out, &err), 2);
  EXPECT_NE(err.find("cannot open folder"), std::string::npos) << err;
  EXPECT_EQ(Run("--bogus", &out, &err), 1);
}

TEST(StepsFile, LinesAreReadAsTheyStreamIn) {
  std::string t = (fs::temp_directory_path() / "xtimer-steps-file-XXXXXX").string();
  std::string dir = mkdtemp(t.data());
  StepRecord r;
  r.rank = 0;
  r.world = 1;
  r.t_begin = 1;
  r.t_end = 2;
  std::string line = StepRecordToJson(r).dump();
  {
    std::ofstream f(dir + "/0-1.steps.jsonl");
    f << line << "\r\n\n" << line;  // CRLF, an empty line, no newline at the end
  }
  StepsInput in;
  ASSERT_TRUE(ReadStepsFile(dir + "/0-1.steps.jsonl", {}, &in));
  EXPECT_EQ(in.records.size(), 2u);
  EXPECT_TRUE(in.problems.empty());
  fs::remove_all(dir);
}

// A step more than a day from every other step of its rank in the file is skipped, named at its
// line; two far-apart steps alone (which one is wrong is unknown) and a rank restarted a week
// later (steps together on each side) are kept.
TEST(StepsFile, AStepFarFromTheOthersIsSkipped) {
  std::string t = (fs::temp_directory_path() / "xtimer-steps-file-XXXXXX").string();
  std::string dir = mkdtemp(t.data());
  auto step = [](int32_t rank, int64_t n, double t) {
    StepRecord r;
    r.rank = rank;
    r.world = 2;
    r.step = n;
    r.t_begin = t;
    r.t_end = t + 1;
    return StepRecordToJson(r).dump() + "\n";
  };
  const double week = 7 * 86400;
  {
    std::ofstream f(dir + "/0-2.steps.jsonl");
    f << step(0, 0, 1.7e9) << step(0, 1, 1.7e9 + 2 * week) << step(0, 2, 1.7e9 + 2) << step(0, 3, 1.7e9 + 4)
      << step(1, 0, 1.7e9) << step(1, 1, 1.7e9 + week);                                 // rank 1: two alone
    f << step(0, 0, 1.7e9 + week) << step(0, 1, 1.7e9 + week + 2) << step(0, 9, 5e10);  // restarted; one far
  }
  StepsInput in;
  ASSERT_TRUE(ReadStepsFile(dir + "/0-2.steps.jsonl", {}, &in));
  std::vector<double> begins;
  for (const StepRecord& r : in.records) begins.push_back(r.t_begin - 1.7e9);
  EXPECT_EQ(begins, (std::vector<double>{0, 2, 4, 0, week, week, week + 2}));
  ASSERT_EQ(in.problems.size(), 2u);
  EXPECT_EQ(in.problems[0], dir +
                                "/0-2.steps.jsonl:2: rank 0's step 1 begins at 1701209600.000 (Unix seconds), "
                                "more than a day from every other step of rank 0 in this file; line skipped");
  EXPECT_EQ(in.problems[1].rfind(dir + "/0-2.steps.jsonl:9: rank 0's step 9 begins at 50000000000.000", 0), 0u)
      << in.problems[1];
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xtimer::slowdown

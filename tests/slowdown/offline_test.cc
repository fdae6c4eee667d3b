// xtimer_slowdown on steps files written from simulated jobs (synthetic_job.h): the same judgement
// as live (the right rank and cause, nothing else; node1's clock 3 s ahead), slowdown.json with its
// episodes, an SVG, and bad input named by file and line without losing the rest: a corrupt line, a
// line cut short at the end of a file, a line over 1 MiB, a FIFO, a rank without a file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/slowdown/step_file_writer.h"
#include "common/slowdown/step_json.h"
#include "tests/slowdown/synthetic_job.h"
#include "viewer/steps_folder.h"

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

  // Runs the command; its exit status, stdout and stderr.
  int Run(const std::string& args, std::string* out, std::string* err) {
    std::string o = dir_ + "/.stdout", e = dir_ + "/.stderr";
    int rc = std::system((std::string(XTIMER_SLOWDOWN_BIN) + " " + args + " >" + o + " 2>" + e).c_str());
    *out = Read(o);
    *err = Read(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
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

}  // namespace
}  // namespace xtimer::slowdown

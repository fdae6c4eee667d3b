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

  // Writes each rank's records of `seconds` of the job as <rank>-<world>.steps.jsonl.
  void WriteJob(JobConfig c, double seconds, std::set<int> skip = {}) {
    SyntheticJob job(c);
    std::map<int, std::ofstream> files;
    for (int r = 0; r < job.world(); ++r)
      if (!skip.contains(r))
        files[r].open(dir_ + "/" + std::to_string(r) + "-" + std::to_string(job.world()) + ".steps.jsonl");
    while (job.now() < c.start + seconds)
      for (auto& [end, rec] : job.Step())
        if (files.contains(rec.rank)) files[rec.rank] << StepRecordToJson(rec).dump() << "\n";
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

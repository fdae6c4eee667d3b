// The node agent's embedded collector link (launcher/agent/embedded_collector_link.cc): step
// records handed to it reach the collector core's slowdown judge as they are, and every verdict
// the core's evaluations make comes back to the agent whole, as a struct. The check: a judge fed
// the same records directly, evaluated at the same moments, gives the same verdicts, down to
// what no wire message carries (each finding's key, the events that started, the sample requests).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <vector>

#include "common/clock.h"
#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_verdict_json.h"
#include "launcher/agent/collector_link.h"
#include "tests/slowdown/synthetic_job.h"

namespace xtimer {
namespace {

namespace fs = std::filesystem;
using slowdown::sim::Injection;
using slowdown::sim::JobConfig;
using slowdown::sim::SyntheticJob;

// Everything a verdict holds: the file's fields, and what only the process that judged has.
void ExpectSameVerdict(const slowdown::Verdict& got, const slowdown::Verdict& want) {
  EXPECT_EQ(slowdown::VerdictJson(got).dump(), slowdown::VerdictJson(want).dump());
  EXPECT_EQ(got.window_end, want.window_end);
  ASSERT_EQ(got.slow.size(), want.slow.size());
  for (size_t i = 0; i < got.slow.size(); ++i) EXPECT_EQ(got.slow[i].key, want.slow[i].key);
  ASSERT_EQ(got.events.size(), want.events.size());
  for (size_t i = 0; i < got.events.size(); ++i) {
    EXPECT_EQ(got.events[i].started, want.events[i].started);
    EXPECT_EQ(got.events[i].line, want.events[i].line);
    EXPECT_EQ(got.events[i].finding.key, want.events[i].finding.key);
  }
  ASSERT_EQ(got.samples.size(), want.samples.size());
  for (size_t i = 0; i < got.samples.size(); ++i) EXPECT_EQ(got.samples[i].rank, want.samples[i].rank);
}

TEST(EmbeddedCollectorLink, StepRecordsReachTheJudgeUnchangedAndItsVerdictsComeBackWhole) {
  setenv("XTIMER_SLOW_INTERVAL", "0.2", 1);  // read by the core's options, below
  const slowdown::JudgeOptions options = slowdown::JudgeOptions::FromEnv();
  ASSERT_EQ(options.interval_s, 0.2);
  fs::path dir = fs::temp_directory_path() / ("xtimer-embedded-link-test-" + std::to_string(getpid()));
  fs::remove_all(dir);

  // A two-node job whose rank 3 gets a GPU half as fast at 30 s, in batches of 2 s of steps
  // (whole steps: every collective has all its members), one batch per evaluation.
  JobConfig c;
  c.start = 1.7e9;
  c.injections = {{Injection::kSlowGpu, 3, 2.0, 30}};
  SyntheticJob job(c);
  std::vector<std::vector<slowdown::StepRecord>> batches(40);
  for (size_t k = 0; k < batches.size(); ++k)
    while (job.now() < c.start + 2.0 * (k + 1))
      for (auto& [end, rec] : job.Step()) batches[k].push_back(std::move(rec));

  // The agent's side: each verdict handed on (in the ticker's thread, between two evaluations)
  // is kept, and the next batch goes in, until a slowdown is judged.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<slowdown::Verdict> verdicts;
  std::vector<double> arrivals;  // of each batch sent
  bool done = false;
  std::unique_ptr<CollectorLink> link = EmbeddedCollector(dir.string(), 30);
  link->SetSlowdownHandlers([](int32_t, double, double) {},
                            [&](const slowdown::Verdict& v) {
                              std::lock_guard<std::mutex> lock(mu);
                              verdicts.push_back(v);
                              done = !v.slow.empty() || arrivals.size() == batches.size();
                              if (done) return cv.notify_all();
                              arrivals.push_back(static_cast<double>(WallMs()) / 1000);
                              link->Steps(batches[arrivals.size() - 1]);
                            });
  link->Start([](const std::string&) {});
  {
    std::lock_guard<std::mutex> lock(mu);  // no evaluation before the judge has records
    arrivals.push_back(static_cast<double>(WallMs()) / 1000);
    link->Steps(batches[0]);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; }));
  }
  link->Stop(0);

  // A judge fed the same records directly, asked at the same moments, says the same every time.
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(verdicts.empty());
  ASSERT_FALSE(verdicts.back().slow.empty()) << "no slowdown judged in " << verdicts.size() << " evaluations";
  slowdown::Judge direct(options);
  for (size_t i = 0; i < verdicts.size(); ++i) {
    SCOPED_TRACE("evaluation " + std::to_string(i));
    for (const slowdown::StepRecord& r : batches[i]) direct.Add(r, arrivals[i]);
    ExpectSameVerdict(verdicts[i], direct.Evaluate(verdicts[i].updated));
  }
  const slowdown::Verdict& last = verdicts.back();
  ASSERT_EQ(last.slow.size(), 1u);
  EXPECT_EQ(last.slow[0].rank, 3);
  EXPECT_EQ(last.slow[0].node, "node0");
  EXPECT_EQ(last.slow[0].cause, slowdown::Cause::kGpuCompute);
  EXPECT_FALSE(last.slow[0].key.empty()) << "the finding's key comes back (no wire message carries it)";
  ASSERT_EQ(last.events.size(), 1u) << "the start of the slowdown comes back with the verdict that started it";
  EXPECT_TRUE(last.events[0].started);
  EXPECT_EQ(last.ranks.size(), 8u);
  EXPECT_FALSE(fs::exists(dir / "slowdown.json")) << "the agent writes slowdown.json, not its embedded core";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xtimer

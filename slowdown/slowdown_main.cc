// xtimer_slowdown: the slowdown judge of the node agent and the collector, over the step records
// the ranks wrote (<rank>-<world>.steps.jsonl). See README.md, "xtimer_slowdown".
#include <getopt.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/atomic_file.h"
#include "common/stacks/rank_set.h"
#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_replay.h"
#include "slowdown/slowdown_svg.h"
#include "slowdown/slowdown_verdict_json.h"
#include "slowdown/steps_folder.h"
#include "viewer/frame_label.h"

namespace {

constexpr const char* kUsage =
    "usage: xtimer_slowdown --path DIR [--out DIR] [--quiet]\n"
    "Reads every *.steps.jsonl in DIR (the ranks' step records), judges them as the node agent and\n"
    "the collector do (XTIMER_SLOW_* settings), prints each slowdown's start and end, and writes\n"
    "slowdown.json and slowdown.svg into --out (default: DIR). Exit status: 0 judged (slowdowns or\n"
    "not), 1 bad arguments, 2 DIR unreadable or without usable records, 3 an output not written.\n";

void Err(const std::string& line) { std::fprintf(stderr, "xtimer_slowdown: %s\n", line.c_str()); }

nlohmann::json EpisodesJson(const xtimer::SlowdownReplay& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const xtimer::SlowdownEpisode& e : r.episodes) {
    nlohmann::json j = xtimer::slowdown::FindingJson(e.finding);
    j["since"] = std::round(e.since * 1000) / 1000;
    j["until"] = std::round(e.until * 1000) / 1000;
    j["duration_s"] = std::round((e.until - e.since) * 10) / 10;
    j["cost_s"] = std::round(e.cost_s * 10) / 10;
    j["ended"] = e.ended;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, out;
  bool quiet = false;
  const option longopts[] = {{"path", required_argument, nullptr, 'p'},
                             {"out", required_argument, nullptr, 'o'},
                             {"quiet", no_argument, nullptr, 'q'},
                             {"help", no_argument, nullptr, 'h'},
                             {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "p:o:qh", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'p': path = optarg; break;
      case 'o': out = optarg; break;
      case 'q': quiet = true; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 1;
    }
  }
  if (path.empty() || optind != argc) {
    std::fputs(kUsage, stderr);
    return 1;
  }
  if (out.empty()) out = path;
  const bool tty = isatty(STDERR_FILENO) == 1 && !quiet;
  auto last = std::chrono::steady_clock::now();
  auto show = [&](const char* what, size_t done, size_t all) {
    if (!tty) return;
    auto now = std::chrono::steady_clock::now();
    if (done != all && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    std::fprintf(stderr, "\r%s: %zu/%zu%s", what, done, all, done == all ? "\n" : "");
    std::fflush(stderr);
  };

  xtimer::StepsFolderOptions options;
  options.progress = [&](size_t done, size_t all) { show("reading steps files", done, all); };
  xtimer::StepsInput input;
  std::string error;
  if (!xtimer::ReadStepsFolder(path, options, &input, &error)) {
    Err(error);
    return 2;
  }
  for (const std::string& p : input.problems) Err(xtimer::PrintableName(p, 400));
  if (!input.ranks_missing.empty())
    Err("no records of rank" + std::string(input.ranks_missing.size() == 1 ? " " : "s ") +
        xtimer::FoldRanks(input.ranks_missing) + " of " + std::to_string(input.world) + " (their <rank>-" +
        std::to_string(input.world) + ".steps.jsonl is missing or empty); judged without them");
  if (input.records.empty()) {
    Err("no usable step record in " + path);
    return 2;
  }

  const xtimer::slowdown::JudgeOptions judge = xtimer::slowdown::JudgeOptions::FromEnv();
  const size_t records = input.records.size();
  xtimer::SlowdownReplay replay = xtimer::ReplaySlowdown(
      std::move(input.records), judge, [&](size_t done, size_t all) { show("judging step records", done, all); });
  for (const std::string& line : replay.clock_lines) Err(xtimer::PrintableName(line, 400));
  if (!quiet)
    for (const std::string& line : replay.lines) std::printf("%s\n", line.c_str());

  nlohmann::json j = xtimer::slowdown::VerdictJson(replay.last);
  j["episodes"] = EpisodesJson(replay);
  if (!xtimer::MakeDirs(out, &error)) {
    Err("--out " + out + ": " + error);
    return 3;
  }
  if (!xtimer::WriteFileAtomically(out + "/slowdown.json",
                                   j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", &error) ||
      !xtimer::WriteFileAtomically(out + "/slowdown.svg",
                                   xtimer::SlowdownSvg(replay, judge.threshold,
                                                       "Slowdowns of " + std::to_string(replay.ranks.size()) +
                                                           " ranks (" + std::to_string(records) + " steps)"),
                                   &error)) {
    Err(error);
    return 3;
  }
  if (!quiet)
    std::printf("%zu slowdown%s in %zu steps of %zu ranks; wrote slowdown.json and slowdown.svg to %s\n",
                replay.episodes.size(), replay.episodes.size() == 1 ? "" : "s", records, replay.ranks.size(),
                out.c_str());
  return 0;
}

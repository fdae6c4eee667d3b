// The report of a network check: JSON (docs/formats.md, "xtimer-netprobe") and the terminal
// table. Pure: built from numbers, rendered from JSON; no sockets.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "netprobe/judge.h"
#include "netprobe/options.h"
#include "netprobe/plan.h"

namespace xtimer::netprobe {

inline constexpr const char* kReportFormat = "xtimer-netprobe";
inline constexpr int kReportVersion = 1;

struct NodeInfo {
  std::string host;  // hostname the node reported
  std::string addr;  // address its probe port listens on, as the others reach it
  int port = 0;      // its probe port
};

struct RoundRecord {
  int round = 0;  // 1-based
  RoundPlan plan;
  double elapsed_s = 0;
  std::vector<int> tests;  // indices into the tests vector
};

struct ReportInput {
  Options options;                // the judging options of the rendezvous
  std::vector<NodeInfo> info;     // per rank
  std::vector<NodeInput> inputs;  // per rank
  std::vector<TestResult> tests;
  std::vector<RoundRecord> rounds;
  Verdict verdict;          // final
  double probe_time_s = 0;  // from the rendezvous start to the verdict
  std::string error;        // non-empty: the probe itself failed (exit 2)
};

JudgeConfig ConfigOf(const Options& o);

nlohmann::json BuildReport(const ReportInput& in);
// 0 healthy, 1 problems found, 2 the probe failed (or the report is unreadable).
int ExitCodeOf(const nlohmann::json& report);
// The final table. Never throws, whatever the JSON holds.
std::string RenderTable(const nlohmann::json& report);
// Progress lines for one finished round (printed by every node and by --serve).
std::string RenderRound(const RoundRecord& round, const std::vector<TestResult>& tests, const Verdict& after,
                        const JudgeConfig& config);

std::string FormatMbps(double mbps);  // "1.23 GB/s", "456 MB/s", "7.8 MB/s"
std::string UtcNow();                 // ISO 8601 with milliseconds

}  // namespace xtimer::netprobe

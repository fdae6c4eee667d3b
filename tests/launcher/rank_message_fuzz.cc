// Fuzz target: any bytes as one datagram on the agent socket (docs/formats.md, "Agent
// channel"), handled as the node agent handles it: ParseRankMessage, then, under the same catch
// as RankChannel::Loop, the registry (RankRegistry::OnMessage) and the fields NodeAgent reads of
// a dump_written message, and for a steps message its records (StepRecordsOf) through a slowdown
// judge, its verdict's JSON and metrics; then what the agent makes of the registry: reports
// (serialised as for the collector), /metrics text, a dump plan. Two connections send the
// message, one closes.
// Nothing may crash or trip a sanitizer (a float where an int belongs, say). Built with
// libFuzzer when the compiler is clang and XTIMER_FUZZ is on; tests/viewer/corpus_replay_main.cc
// replays the kept corpus (tests/launcher/fuzz_corpus) as an ordinary test.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "common/prometheus_text.h"
#include "common/rank_metrics.h"
#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_metrics.h"
#include "slowdown/slowdown_verdict_json.h"
#include "launcher/agent/rank_channel.h"
#include "launcher/agent/rank_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > xtimer::RankChannel::kMaxMessage) return 0;  // dropped by size before parsing
  nlohmann::json msg;
  std::string why;
  if (!xtimer::ParseRankMessage(std::string_view(reinterpret_cast<const char*>(data), size), &msg, &why)) return 0;
  xtimer::RankRegistry registry;
  for (int conn : {1, 2}) {
    try {
      registry.OnMessage(conn, msg);
      if (msg.value("type", "") == "dump_written") {  // NodeAgent::OnRankMessage
        (void)msg.value("path", "");
        (void)msg.value("rank", -1);
        (void)msg.value("request_id", "");
      }
    } catch (const std::exception&) {  // a field of the wrong type: the message is dropped
    }
  }
  if (msg.value("type", "") == "steps") {  // NodeAgent::OnSteps, and the judge behind it
    std::vector<xtimer::slowdown::StepRecord> records;
    (void)xtimer::StepRecordsOf(msg, &records, &why);
    xtimer::slowdown::Judge judge;
    double now = 0;
    for (auto& r : records) {
      now = std::max(now, r.t_end);
      judge.Add(r, now);
      judge.Add(std::move(r), now);  // the same batch twice (an agent that retried)
    }
    xtimer::slowdown::Verdict v = judge.Evaluate(now);
    v = judge.Evaluate(now + 3);
    (void)xtimer::slowdown::VerdictText(v);
    xtimer::PrometheusText metrics;
    xtimer::slowdown::AppendSlowdownMetrics(v, &metrics);
    (void)metrics.Text();
  }
  std::string wire;
  for (const auto& r : registry.Reports(true)) wire += r.SerializeAsString();
  xtimer::PrometheusText text;
  xtimer::AppendRankMetrics(registry.Reports(true), &text);
  (void)text.Text();
  (void)registry.PlanDump(10);
  int rank = 0;
  std::string trigger;
  (void)registry.FindHung(&rank, &trigger);
  registry.OnClose(1);
  (void)registry.TakeStateChange();
  registry.ForgetExited();
  return 0;
}

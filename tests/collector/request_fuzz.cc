// Fuzz target: any bytes as a sequence of collector requests, parsed from the gRPC wire format as
// the service parses them, and handed to a CollectorCore (collector/collector_core.h) with a fake
// clock: registrations, rank reports (hangs start dump rounds), stack uploads (validated, merged,
// written), step records for the slowdown judge, ticks (rounds finish and are merged into their
// outputs; the judge evaluates), disconnects, and the HTTP front end's question for a round's file. Built with
// libFuzzer when the compiler is clang and XTIMER_FUZZ is on; with tests/viewer/corpus_replay_main.cc the kept corpus
// (tests/collector/corpus) replays as an ordinary test under any compiler.
//
// Input: records of [kind byte][length, 2 bytes little-endian][length bytes]. A request that names
// no session gets the newest session the core handed out, so the fuzzer reaches past the check.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "collector.pb.h"
#include "collector/collector_core.h"
#include "slowdown/slowdown_proto.h"
#include "tests/collector/request_fuzz_records.h"

namespace {

using namespace xtimer;
using namespace xtimer::collector;

// Never destroyed: the exit handler that removes the folder runs after static destructors.
const std::string* out_dir = nullptr;

const std::string& OutDir() {
  static const bool made = [] {
    char tmpl[] = "/tmp/xtimer-request-fuzz-XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    out_dir = new std::string(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*out_dir, ec);
    });
    return true;
  }();
  (void)made;
  return *out_dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::error_code ec;
  std::filesystem::remove_all(OutDir() + "/out", ec);
  double now = 1000;
  CoreOptions o;
  o.out_dir = OutDir() + "/out";
  o.dump_wait_s = 2;
  o.upload_window = 2;
  o.max_stack_bytes = 1 << 20;
  o.output_formats = 2 | 8;  // folded + speedscope; the viewer's fuzz target covers SVG and DOT
  o.monotonic_s = [&now] { return now; };
  o.wall_ms = [&now] { return int64_t{1795341530000} + static_cast<int64_t>(now * 1000); };
  CollectorCore core(o);
  std::vector<std::string> sessions;
  std::vector<v1::Command> commands;
  auto session_or_last = [&](const std::string& s) { return s.empty() && !sessions.empty() ? sessions.back() : s; };

  for (const fuzz::Record& r : fuzz::SplitRecords(std::string_view(reinterpret_cast<const char*>(data), size))) {
    switch ((r.kind & 0x7f) % fuzz::kRecordKinds) {
      case fuzz::kRegister: {
        v1::RegisterRequest req;
        if (!req.ParseFromArray(r.bytes.data(), static_cast<int>(r.bytes.size()))) break;
        std::string error;
        std::string s = core.Register(
            req,
            [&commands](const v1::Command& c) {
              if (commands.size() < 1000) commands.push_back(c);
            },
            &error);
        if (!s.empty()) sessions.push_back(s);
        break;
      }
      case fuzz::kReport: {
        v1::ReportRequest req;
        if (!req.ParseFromArray(r.bytes.data(), static_cast<int>(r.bytes.size()))) break;
        req.set_session(session_or_last(req.session()));
        v1::Command reply;
        core.Report(req, (r.kind & 0x80) ? &reply : nullptr);
        if (reply.kind() == v1::Command::DUMP && commands.size() < 1000) commands.push_back(reply);
        break;
      }
      case fuzz::kUpload: {
        v1::StackUpload u;
        if (!u.ParseFromArray(r.bytes.data(), static_cast<int>(r.bytes.size()))) break;
        u.set_session(session_or_last(u.session()));
        // "@" as the dump id: the one of the newest DUMP command (a round under way).
        if (u.dump_id() == "@" && !commands.empty()) u.set_dump_id(commands.back().dump_id());
        core.Upload(u);
        break;
      }
      case fuzz::kSteps: {
        v1::StepsRequest req;
        if (!req.ParseFromArray(r.bytes.data(), static_cast<int>(r.bytes.size()))) break;
        // As the gRPC service does: the records converted at the edge, the verdict back to the wire.
        std::vector<slowdown::StepRecord> records;
        for (const v1::StepRecord& p : req.records()) records.push_back(slowdown::StepRecordFromProto(p));
        slowdown::Verdict reply;
        core.Steps(session_or_last(req.session()), std::move(records), (r.kind & 0x80) ? &reply : nullptr);
        if (reply.updated > 0) slowdown::VerdictToProto(reply);
        break;
      }
      case fuzz::kTick:
        now += r.bytes.empty() ? 0.1 : static_cast<unsigned char>(r.bytes[0]) * 0.05;
        core.Tick();
        break;
      case fuzz::kDisconnect: core.Disconnect(session_or_last(std::string(r.bytes))); break;
      case fuzz::kRoundFile: {
        size_t cut = r.bytes.find('/');
        std::string_view name = r.bytes.substr(0, cut);
        std::string_view file = cut == std::string_view::npos ? std::string_view() : r.bytes.substr(cut + 1);
        if (name.empty()) {
          std::vector<RoundInfo> rounds = core.Rounds();
          if (!rounds.empty()) {
            std::string n = rounds.front().name;
            (void)core.RoundFile(n, file);
            break;
          }
        }
        (void)core.RoundFile(name, file);
        break;
      }
    }
  }
  core.FinishRounds();
  (void)core.MetricsText();
  (void)core.StatusJson();
  (void)core.StatusPageHtml();
  (void)core.Slowdown();
  return 0;
}

// CollectorLink to a collector core in this process: a single-node job (no XTIMER_COLLECTOR)
// gets the same dump rounds and merged verdicts as a cluster, written under
// XTIMER_TIMELINE_PATH/<hang time>/, and the same slowdown judge (its verdicts go to the agent,
// which writes slowdown.json itself, as it does with a remote collector). Step records go to the
// core and verdicts come back as structs: nothing is converted on the way.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "collector/collector_core.h"
#include "common/identity.h"
#include "common/log.h"
#include "launcher/agent/collector_link.h"

namespace xtimer {
namespace {

class EmbeddedCollectorLink : public CollectorLink {
 public:
  EmbeddedCollectorLink(const std::string& out_dir, double dump_wait_s) : core_(Options(out_dir, dump_wait_s)) {}
  ~EmbeddedCollectorLink() override { Stop(0); }

  void Start(OnDump on_dump) override {
    v1::RegisterRequest req;
    req.set_protocol_version(1);
    req.set_node(HostName());
    req.set_agent_id("embedded");
    session_ = core_.Register(req, [this, on_dump = std::move(on_dump)](const v1::Command& c) {
      if (c.kind() == v1::Command::DUMP) on_dump(c.dump_id());
      if (c.kind() == v1::Command::SAMPLE && on_sample_) on_sample_(c.rank(), c.seconds(), c.hz());
    });
    // Deadlines of dump rounds; the slowdown judge's evaluations, each new verdict handed on.
    ticker_ = std::thread([this] {
      double last_verdict = 0;
      while (!stopping_) {
        core_.Tick();
        slowdown::Verdict v = core_.Slowdown();
        if (v.updated != last_verdict && on_verdict_) on_verdict_(v);
        last_verdict = v.updated;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }

  void Report(std::vector<v1::RankReport> reports, bool urgent) override {
    v1::ReportRequest req;
    req.set_session(session_);
    for (auto& r : reports) *req.add_reports() = std::move(r);
    core_.Report(req);
  }

  void Eviction(v1::NodeEviction eviction) override {
    v1::ReportRequest req;
    req.set_session(session_);
    *req.add_evictions() = std::move(eviction);
    core_.Report(req);
  }

  void Upload(int rank, const std::string& dump_id, std::string stack_json) override {
    v1::StackUpload u;
    u.set_session(session_);
    u.set_rank(rank);
    u.set_dump_id(dump_id);
    u.set_stack_json(std::move(stack_json));
    v1::UploadReply reply = core_.Upload(u);
    if (!reply.accepted())
      Log(LogLevel::kWarn, "agent: rank %d's stacks were not merged: %s", rank, reply.reason().c_str());
  }

  void Steps(std::vector<slowdown::StepRecord> records) override { core_.Steps(session_, std::move(records)); }

  void Stop(int ms) override {
    if (stopping_.exchange(true)) return;
    if (ticker_.joinable()) ticker_.join();
    core_.FinishRounds();  // the job ended: merge what a round in progress has
  }

  bool connected() const override { return true; }

  bool RoundOpen() const override {
    std::vector<collector::RoundInfo> rounds = core_.Rounds();
    return !rounds.empty() && !rounds.front().finished;
  }

 private:
  static collector::CoreOptions Options(const std::string& out_dir, double dump_wait_s) {
    collector::CoreOptions o;
    o.out_dir = out_dir;
    o.dump_wait_s = dump_wait_s;
    o.slowdown = slowdown::JudgeOptions::FromEnv();
    o.log_registrations = false;
    o.upload_window = 0;       // one agent, in this process: nothing to pace
    o.write_slowdown = false;  // the agent writes slowdown.json from the verdicts
    return o;
  }

  collector::CollectorCore core_;
  std::string session_;
  std::thread ticker_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

std::unique_ptr<CollectorLink> EmbeddedCollector(const std::string& out_dir, double dump_wait_s) {
  return std::make_unique<EmbeddedCollectorLink>(out_dir, dump_wait_s);
}

}  // namespace xtimer

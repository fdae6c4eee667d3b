// The rank's side of the local channel to the node agent (xtimer_launch), when
// XTIMER_AGENT_SOCKET names one. One thread ("xtimer-agent") connects to the Unix
// SOCK_SEQPACKET socket and, every second, sends the rank's state; it forwards summaries the
// poller hands it, notices finished stack dumps, and carries out the agent's dump requests.
// Training threads never touch the socket. If there is no agent, or it goes away, the library
// keeps working: messages are dropped and the thread retries the connection now and then.
// Message formats: docs/formats.md, "Agent channel".
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "preload/base/config.h"
#include "preload/hang/watchdog.h"
#include "preload/steps/step_signals.h"
#include "preload/timing/poller_sinks.h"

namespace xtimer {

class CommTable;
class Poller;

class AgentLink final : public SummarySink, public StepRecordSink, public HangSink {
 public:
  struct Settings {
    HangAction hang_action = HangAction::kDump;  // whether our own hang is followed by a dump
  };
  // `rank_info` names the rank in every message.
  AgentLink(Settings settings, std::function<RankInfo()> rank_info);
  // Starts the thread if XTIMER_AGENT_SOCKET is set; returns whether it did. The thread reads
  // the oldest op in flight from `poller` and hands the agent's sample requests to `steps`
  // (null: XTIMER_STEPS=0); both outlive it.
  // `comms` (null: none) are read for collective fingerprints, sent every 0.1 s (`prints`).
  bool Start(Poller& poller, StepSignals* steps, CommTable* comms = nullptr);
  bool active() const override { return active_; }

  // Poller: the latest summary JSON (sent with the next tick).
  void OfferSummary(std::string summary_json) override;
  // Poller: step records, one JSON object per line (step_signals.h); sent in batches, at most
  // one message a second. The oldest are dropped beyond kMaxQueuedSteps.
  void OfferSteps(const std::string& lines) override;
  static constexpr size_t kMaxQueuedSteps = 512;
  // Watchdog: a hang was found (hung, with what), or the hang resolved. Sent at once.
  void SetHang(bool hung, const std::string& trigger) override;
  // At exit: waits (at most `ms`) until the offered summary and step records have been sent.
  void Flush(int ms) override;

 private:
  void Loop();
  bool Connect();
  bool Send(const std::string& msg);
  void SendStatus();
  void SendSteps();
  void SendPrints();
  void ReceiveCommands();
  void ReportFinishedDumps();
  void AnswerDumpRequest(const std::string& request_id);
  void WriteRankFields(class JsonWriter& w);

  const Settings settings_;
  const std::function<RankInfo()> rank_info_;
  Poller* poller_ = nullptr;        // set by Start
  StepSignals* sampler_ = nullptr;  // set by Start
  CommTable* comms_ = nullptr;      // set by Start
  uint64_t prints_lost_ = 0;        // link thread only: fingerprints overwritten before they were read
  std::string path_;
  bool active_ = false;
  int fd_ = -1;       // link thread only
  int wake_fd_ = -1;  // eventfd: something to send now
  std::thread thread_;

  void Wake();

  Mutex mu_;
  CondVar sent_;
  std::string summary_ XT_GUARDED_BY(mu_);
  std::deque<std::string> steps_ XT_GUARDED_BY(mu_);  // records not sent yet
  bool flush_steps_ XT_GUARDED_BY(mu_) = false;       // exiting: send them without waiting for the next second
  std::string hang_trigger_ XT_GUARDED_BY(mu_);
  bool hung_ XT_GUARDED_BY(mu_) = false;
  bool state_changed_ XT_GUARDED_BY(mu_) = false;
  uint64_t hang_at_ns_ XT_GUARDED_BY(mu_) = 0;         // when our own hang dump was asked for (0: none)
  uint64_t dumps_before_hang_ XT_GUARDED_BY(mu_) = 0;  // completed dumps before it

  uint64_t dumps_seen_ = 0;        // link thread only
  bool resend_last_dump_ = false;  // link thread only
  std::string pending_request_;    // id of the agent's dump request being served
};

}  // namespace xtimer

// How the node agent reaches a collector: over gRPC to xtimer_collector (XTIMER_COLLECTOR), or
// in-process to an embedded collector core for this node alone. Calls never block the agent:
// reports, uploads and step records are queued and sent by the link's own thread. A link that
// loses its collector keeps trying with backoff; a restarted collector learns the node again.
// The collector's slowdown judge answers with its verdicts and asks for Python samples
// (SetSlowdownHandlers). Step records and verdicts cross this interface as structs
// (common/steps/step_record.h, slowdown/slowdown_verdict.h): only the gRPC link converts them to and from the
// wire (slowdown_proto.h); the embedded core takes and gives them as they are.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collector.pb.h"
#include "common/desync/fingerprint.h"
#include "common/steps/step_record.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer {

class CollectorLink {
 public:
  using OnDump = std::function<void(const std::string& dump_id)>;
  using OnSample = std::function<void(int32_t rank, double seconds, double hz)>;
  using OnVerdict = std::function<void(const slowdown::Verdict& verdict)>;
  using OnOutOfStep = std::function<void(int32_t rank, const std::string& comm, const std::string& reason)>;
  virtual ~CollectorLink() = default;
  // Before Start: where the judge's sample requests (ask this local rank for Python samples of
  // its main thread) and its verdicts (each new evaluation: the job's slowdowns, this node's
  // ranks' step times) go. Called from the link's threads; must not block.
  void SetSlowdownHandlers(OnSample on_sample, OnVerdict on_verdict) {
    on_sample_ = std::move(on_sample);
    on_verdict_ = std::move(on_verdict);
  }
  // Before Start: where the collector's desync verdicts go (ranks out of step across nodes: the
  // first suspect, the communicator, the verdict's line). Called from the link's thread; must not block.
  void SetOutOfStepHandler(OnOutOfStep on_out_of_step) { on_out_of_step_ = std::move(on_out_of_step); }
  // `on_dump` is called (from the link's thread) when the collector wants every local rank's stacks.
  virtual void Start(OnDump on_dump) = 0;
  // The node's ranks now; `urgent` sends them at once (a hang: their state, the op statistics
  // follow with the next period), else with the next period.
  virtual void Report(std::vector<v1::RankReport> reports, bool urgent) = 0;
  // A rank's (symbolised) stack file for the dump round `dump_id` ("" for a dump of its own).
  virtual void Upload(int rank, const std::string& dump_id, std::string stack_json) = 0;
  // Local ranks' step records for the slowdown judge (sent about once a second; a backlog
  // beyond what the link holds loses its oldest records). The collector checks them.
  virtual void Steps(std::vector<slowdown::StepRecord> records) = 0;
  // One local rank's collective fingerprints (common/desync/fingerprint.h) for a remote
  // collector, which compares the ranks of every node; batched and sent about every 0.2 s with
  // a report (a backlog beyond what the link holds loses its oldest). The embedded collector
  // ignores them: the agent compares its own ranks.
  virtual void Prints(int32_t rank, std::vector<desync::Fingerprint> calls) {
    (void)rank;
    (void)calls;
  }
  // xtimer_run --evict-slow-nodes evicted this node (the record of its etcd key and the
  // verdict's line): told to the collector once, at once, for its page and /metrics. The gRPC
  // link sends it with the next report (retried until sent; Stop waits for it as for a report);
  // the embedded core takes it at once.
  virtual void Eviction(v1::NodeEviction eviction) = 0;
  // Sends what is queued for at most `ms` milliseconds, then stops.
  virtual void Stop(int ms) = 0;
  virtual bool connected() const = 0;
  // A dump round is still open (waiting for stacks or merging); only the embedded collector
  // knows, a remote one says false.
  virtual bool RoundOpen() const { return false; }

 protected:
  OnSample on_sample_;
  OnVerdict on_verdict_;
  OnOutOfStep on_out_of_step_;
};

// XTIMER_COLLECTOR=host:port. `token_file` (may be empty) holds the bearer token; `ca_file`
// (may be empty) the PEM roots for a TLS collector. nullptr with *error on a bad setting.
std::unique_ptr<CollectorLink> ConnectToCollector(const std::string& address, const std::string& token_file,
                                                  const std::string& ca_file, std::string* error);

// A collector core in this process for this node alone, writing merged dumps under `out_dir`.
std::unique_ptr<CollectorLink> EmbeddedCollector(const std::string& out_dir, double dump_wait_s);

}  // namespace xtimer

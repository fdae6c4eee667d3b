// The rendezvous: a small TCP server that admits the nodes, plans the rounds, tells each pair
// when to test, collects the results and sends everyone the verdict. It carries control messages
// only (README.md lists them); probe traffic goes straight between the nodes.
//
// It is one thread with one poll loop. Every phase has a deadline: nodes that have not joined
// when the join deadline passes are missing; a test whose result does not arrive in time failed;
// a connection that sends something malformed is dropped with one line on stderr.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/net/net.h"
#include "netprobe/options.h"
#include "netprobe/report.h"
#include "netprobe/wire.h"

namespace xtimer::netprobe {

class Rendezvous {
 public:
  // `listen_fd` is bound already (so that the caller knows the address is ours). With
  // `print_progress` the round summaries also go to stdout (--serve).
  Rendezvous(const Options& options, net::Fd listen_fd, bool print_progress);
  ~Rendezvous();

  // Runs the whole probe and returns the report (exit_code 2 and "error" when it failed).
  nlohmann::json Run();

 private:
  struct Conn {
    net::Fd fd;
    FrameDecoder decoder;
    int rank = -1;  // -1 until joined
    std::string peer;
    net::Deadline join_deadline = net::Deadline::In(0);
  };
  struct Pending {
    int test = -1;  // index into tests_
    uint64_t id = 0;
    bool need_uid = false;  // nccl: the responder waits for the initiator's unique id
    bool done_a = false, done_b = false;
    std::string error_a, error_b;
    net::Deadline deadline = net::Deadline::In(0);
    double start_s = 0, end_s = 0;  // monotonic: told to start, ended (0: not yet)
    bool stopping = false;          // told to stop early (early_stop.h)
  };

  void PollOnce(net::Deadline until);
  void Accept();
  void ReadFrom(Conn* c);
  void OnMessage(Conn* c, const nlohmann::json& msg);
  void OnJoin(Conn* c, const nlohmann::json& msg);
  void OnResult(Conn* c, const nlohmann::json& msg);
  void OnUid(Conn* c, const nlohmann::json& msg);
  void OnLocalResult(Conn* c, const nlohmann::json& msg);
  void Drop(Conn* c, const std::string& why);
  void NodeLeft(int rank, const std::string& why);
  bool SendTo(int rank, const nlohmann::json& msg);
  void Broadcast(const nlohmann::json& msg);
  void Progress(const std::string& text);

  void JoinPhase();
  void LocalPhase();
  void RunRound(const RoundPlan& plan);
  void RunStep(const Step& step, int round, int step_no, bool base, std::vector<int>* indices);
  // Tells the initiators of the step's tests that early_stop.h's rule names to stop.
  void StopSlowTests(const std::vector<uint64_t>& ids);
  nlohmann::json TestMessage(const Pending& p, bool initiator, const std::string& uid);
  Verdict JudgeNow(bool final);
  void Finish(nlohmann::json* report);

  Options o_;
  net::Fd listen_;
  bool print_;
  enum class Phase { kJoin, kLocal, kRounds, kDone } phase_ = Phase::kJoin;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> node_conn_;  // per rank, null when not connected
  std::vector<NodeInput> inputs_;
  std::vector<NodeInfo> info_;
  std::vector<int> local_pending_;
  std::vector<TestResult> tests_;
  std::vector<RoundRecord> rounds_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  double started_ = 0;
};

}  // namespace xtimer::netprobe

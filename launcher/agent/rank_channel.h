// The node agent's end of the local channel: a Unix SOCK_SEQPACKET socket that every rank
// process below xtimer_launch connects to (XTIMER_AGENT_SOCKET). Each message is one JSON
// object (docs/formats.md, "Agent channel"). A malformed, truncated or oversized message is
// dropped with one log line; it never affects other ranks.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/steps/step_record.h"

#include "common/mutex.h"

namespace xtimer {

// One datagram from a rank as a message: true if it is a JSON object with a string "type" and no
// fraction where the agent reads an integer (pid, rank, world_size, local_rank, dumps, and the
// summary's count, bytes, m, n, k); else false and *why, for the log line. Fields of other wrong
// types still reach the handler, which runs under a catch (see Loop). The fuzz target
// tests/launcher/rank_message_fuzz.cc feeds it and the registry arbitrary bytes.
bool ParseRankMessage(std::string_view bytes, nlohmann::json* msg, std::string* why);

// The step records of a `steps` message (docs/formats.md, "Agent channel"): each element of
// "records" read by the record rules (common/steps/step_json.h); a record of another rank
// than the message's is not taken. Returns how many could not be used (*why: the first reason).
size_t StepRecordsOf(const nlohmann::json& msg, std::vector<slowdown::StepRecord>* out, std::string* why);

class RankChannel {
 public:
  using OnMessage = std::function<void(int conn, const nlohmann::json& msg)>;
  using OnClose = std::function<void(int conn)>;

  ~RankChannel();
  // Creates the socket at `path` (its folder must exist and be ours).
  bool Listen(const std::string& path, std::string* error);
  // Serves connections on a thread until Stop().
  void Start(OnMessage on_message, OnClose on_close);
  // Sends without blocking; false if the rank is gone or its queue is full.
  bool Send(int conn, const std::string& msg) XT_EXCLUDES(mu_);
  void Stop() XT_EXCLUDES(mu_);

  static constexpr size_t kMaxMessage = 256 * 1024;

 private:
  void Loop() XT_EXCLUDES(mu_);

  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd that ends Loop
  OnMessage on_message_;
  OnClose on_close_;
  std::thread thread_;
  Mutex mu_;
  std::map<int, int> conns_ XT_GUARDED_BY(mu_);  // connection id -> fd
};

}  // namespace xtimer

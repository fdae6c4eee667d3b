// Upload pacing for one dump round (collector/README.md, "Asking" and "Pacing"): which agents the
// round has asked for their stacks, and which of them may upload now.
//
//   - Each session is asked once (Ask). While fewer than `window` sessions are uploading, the
//     DUMP says upload now and the session joins the window; otherwise it says hold
//     (wait_for_upload) and the session waits in line, in the order asked.
//   - A session leaves the window when every rank it has is in the round (Uploaded, Expire), when
//     it is gone, or after `idle_s` without an upload (Expire). Then GrantNext lets the next
//     reachable sessions in line upload (an UPLOAD command each, sent by the caller).
//   - window 0: no pacing; every DUMP says upload now and nothing is tracked but `asked`.
//   - The sessions the round's first report did not reach are asked once, kDumpFanoutDelayS after
//     the start (FanOutDue), so that a burst of hang reports gets its DUMPs in their replies.
//
// Not thread-safe: it is part of a DumpRound and guarded by the core's mutex (collector_core.cc).
// It knows sessions by id only; the caller says which are reachable, gone or done.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace xtimer::collector {

// A dump round asks the agent whose report started it at once, and every other agent with the
// reply to its next report, or on the first Tick this long after the start, whichever comes
// first. When all ranks hang at once their reports arrive together: the DUMPs then ride on the
// replies instead of a second burst of as many messages on the command streams.
inline constexpr double kDumpFanoutDelayS = 0.1;

class UploadPacing {
 public:
  UploadPacing(size_t window, double idle_s) : window_(window), idle_s_(idle_s) {}

  // Asks `session` (reachable: the caller checked): false when it was asked already. Else
  // *upload_now says whether its DUMP lets it upload at once (true) or tells it to hold.
  bool Ask(const std::string& session, double now, bool* upload_now);
  // True once, on the first call at or after started_s + kDumpFanoutDelayS: time to ask every
  // session not asked yet.
  bool FanOutDue(double started_s, double now);

  // An upload from `session`: true when it was in the window (its idle time restarts). The caller
  // then calls Leave if all its ranks are in.
  bool Uploaded(const std::string& session, double now);
  void Leave(const std::string& session) { granted_.erase(session); }
  // Sessions in the window that are `gone` or `done`, or silent for idle_s, leave it.
  void Expire(double now, const std::function<bool(const std::string&)>& gone,
              const std::function<bool(const std::string&)>& done);
  // Lets waiting sessions upload while the window has room, skipping those not `reachable`
  // (they lose their turn). Returns the sessions to send UPLOAD to, in order.
  std::vector<std::string> GrantNext(double now, const std::function<bool(const std::string&)>& reachable);

  size_t waiting() const { return to_grant_.size(); }  // asked to hold, not yet told UPLOAD
  bool paced() const { return window_ != 0; }

 private:
  const size_t window_;
  const double idle_s_;
  std::unordered_set<std::string> asked_;            // sessions sent this round's DUMP
  bool fanned_out_ = false;                          // FanOutDue said so
  std::deque<std::string> to_grant_;                 // holding their stacks, in the order asked
  std::unordered_map<std::string, double> granted_;  // uploading: time of the grant or last upload
};

}  // namespace xtimer::collector

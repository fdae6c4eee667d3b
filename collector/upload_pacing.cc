#include "collector/upload_pacing.h"

namespace xtimer::collector {

bool UploadPacing::Ask(const std::string& session, double now, bool* upload_now) {
  if (!asked_.insert(session).second) return false;
  *upload_now = window_ == 0 || granted_.size() < window_;
  if (window_ != 0) {
    if (*upload_now) granted_[session] = now;
    else to_grant_.push_back(session);
  }
  return true;
}

bool UploadPacing::FanOutDue(double started_s, double now) {
  if (fanned_out_ || now < started_s + kDumpFanoutDelayS) return false;
  fanned_out_ = true;
  return true;
}

bool UploadPacing::Uploaded(const std::string& session, double now) {
  auto g = granted_.find(session);
  if (g == granted_.end()) return false;
  g->second = now;
  return true;
}

void UploadPacing::Expire(double now, const std::function<bool(const std::string&)>& gone,
                          const std::function<bool(const std::string&)>& done) {
  for (auto it = granted_.begin(); it != granted_.end();) {
    if (gone(it->first) || now - it->second >= idle_s_ || done(it->first)) it = granted_.erase(it);
    else ++it;
  }
}

std::vector<std::string> UploadPacing::GrantNext(double now, const std::function<bool(const std::string&)>& reachable) {
  std::vector<std::string> out;
  while (granted_.size() < window_ && !to_grant_.empty()) {
    std::string session = std::move(to_grant_.front());
    to_grant_.pop_front();
    if (!reachable(session)) continue;
    granted_[session] = now;
    out.push_back(std::move(session));
  }
  return out;
}

}  // namespace xtimer::collector

#include "collector/pending_dumps.h"

namespace xtimer::collector {
namespace {

constexpr size_t kMaxPendingBytes = size_t{512} << 20;

}  // namespace

void PendingDumps::Keep(int32_t rank, const std::string& bytes, const std::string& source, double now) {
  auto it = by_rank_.find(rank);
  if (it != by_rank_.end()) bytes_ -= it->second.bytes.size();
  PendingDump& p = by_rank_[rank];
  p.bytes = bytes;
  p.source = source;
  p.received_s = now;
  bytes_ += bytes.size();
  while (bytes_ > kMaxPendingBytes && !by_rank_.empty()) {  // the oldest goes first
    auto oldest = by_rank_.begin();
    for (auto i = by_rank_.begin(); i != by_rank_.end(); ++i)
      if (i->second.received_s < oldest->second.received_s) oldest = i;
    bytes_ -= oldest->second.bytes.size();
    by_rank_.erase(oldest);
  }
}

std::vector<std::pair<int32_t, PendingDump>> PendingDumps::TakeSince(double since) {
  std::vector<std::pair<int32_t, PendingDump>> take;
  for (auto it = by_rank_.begin(); it != by_rank_.end();) {
    if (it->second.received_s >= since) {
      bytes_ -= it->second.bytes.size();
      take.emplace_back(it->first, std::move(it->second));
      it = by_rank_.erase(it);
    } else {
      ++it;
    }
  }
  return take;
}

void PendingDumps::Expire(double now, double max_age_s) {
  for (auto it = by_rank_.begin(); it != by_rank_.end();) {
    if (now - it->second.received_s > max_age_s) {
      bytes_ -= it->second.bytes.size();
      it = by_rank_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace xtimer::collector

#include "collector/rank_table.h"

#include "collector/agent_strings.h"
#include "common/log.h"
#include "common/stacks/stack_file.h"

namespace xtimer::collector {
namespace {

constexpr size_t kMaxOpsPerRank = 512;

}  // namespace

bool RankTable::Valid(const v1::Rank& r) {
  return r.world_size() >= 1 && r.world_size() <= kMaxStackWorldSize && r.rank() >= 0 && r.rank() < r.world_size();
}

bool RankTable::AdoptWorld(int32_t w) {
  if (w == world_) return false;
  if (world_ != 0)
    Log(LogLevel::kInfo, "collector: the job's world size is now %d (was %d)", static_cast<int>(w),
        static_cast<int>(world_));
  world_ = w;
  for (auto it = ranks_.begin(); it != ranks_.end();)
    it = it->second.report.rank().world_size() != w ? ranks_.erase(it) : std::next(it);
  return true;
}

void RankTable::Register(const v1::Rank& r) {
  RankEntry& e = ranks_[r.rank()];
  if (!e.reported) {
    *e.report.mutable_rank() = r;
    Truncate(e.report.mutable_rank()->mutable_host(), 255);
  }
}

bool RankTable::Update(const v1::RankReport& r, double now, int64_t wall_ms) {
  RankEntry& e = ranks_[r.rank().rank()];
  v1::RankState prev = e.reported ? e.report.state() : v1::RANK_STATE_UNKNOWN;
  if (r.ops_size() == 0 && e.reported) {
    // A state-only report (a hang event) keeps the op statistics of the last full one.
    google::protobuf::RepeatedPtrField<v1::OpStat> ops;
    ops.Swap(e.report.mutable_ops());
    e.report = r;
    e.report.mutable_ops()->Swap(&ops);
  } else {
    e.report = r;
    if (e.report.ops_size() > static_cast<int>(kMaxOpsPerRank))
      e.report.mutable_ops()->DeleteSubrange(kMaxOpsPerRank, e.report.ops_size() - kMaxOpsPerRank);
    for (v1::OpStat& op : *e.report.mutable_ops()) {
      Truncate(op.mutable_name(), 256);
      Truncate(op.mutable_kind(), 32);
      Truncate(op.mutable_comm(), 64);
      Truncate(op.mutable_shape(), 128);
    }
  }
  Truncate(e.report.mutable_rank()->mutable_host(), 255);
  Truncate(e.report.mutable_trigger(), 1024);
  Truncate(e.report.mutable_oldest_inflight_op(), 512);
  e.reported = true;
  e.last_seen_s = now;
  e.last_seen_wall_ms = wall_ms;
  return r.state() == v1::RANK_STATE_HUNG && prev != v1::RANK_STATE_HUNG;
}

bool RankTable::AnyHung(double now, double stale_after_s) const {
  for (const auto& [rank, e] : ranks_)
    if (e.reported && e.report.state() == v1::RANK_STATE_HUNG && now - e.last_seen_s <= stale_after_s) return true;
  return false;
}

}  // namespace xtimer::collector

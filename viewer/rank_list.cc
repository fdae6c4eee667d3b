#include "viewer/rank_list.h"

#include <algorithm>

namespace xtimer {

void RankList::Add(int32_t rank) {
  if (count_ == 0) {
    first_ = {rank, rank};
    count_ = 1;
    return;
  }
  Run& last = more_ && !more_->empty() ? more_->back() : first_;
  if (rank == last.last) return;
  if (rank == last.last + 1) {
    last.last = rank;
    ++count_;
    return;
  }
  AddRun({rank, rank});
}

void RankList::AddRun(Run run) {
  bool was_empty = count_ == 0;
  count_ += static_cast<uint32_t>(run.last - run.first + 1);
  if (was_empty) {
    first_ = run;
    return;
  }
  if (!more_) more_ = std::make_unique<std::vector<Run>>();
  more_->push_back(run);
}

void RankList::Append(const RankList& other) {
  if (other.count_ == 0) return;
  AddRun(other.first_);
  if (other.more_)
    for (Run r : *other.more_) AddRun(r);
}

void RankList::Finish() {
  if (!more_) return;
  std::vector<Run> runs;
  runs.reserve(more_->size() + 1);
  runs.push_back(first_);
  runs.insert(runs.end(), more_->begin(), more_->end());
  std::sort(runs.begin(), runs.end(), [](Run a, Run b) { return a.first < b.first; });
  std::vector<Run> merged;
  for (Run r : runs) {
    if (!merged.empty() && int64_t{r.first} <= int64_t{merged.back().last} + 1)
      merged.back().last = std::max(merged.back().last, r.last);
    else merged.push_back(r);
  }
  count_ = 0;
  for (Run r : merged) count_ += static_cast<uint32_t>(r.last - r.first + 1);
  first_ = merged.front();
  if (merged.size() == 1) {
    more_.reset();
  } else {
    more_->assign(merged.begin() + 1, merged.end());
    more_->shrink_to_fit();
  }
}

std::vector<int32_t> RankList::ToVector() const {
  std::vector<int32_t> out;
  out.reserve(count_);
  auto put = [&](Run r) {
    for (int64_t x = r.first; x <= r.last; ++x) out.push_back(static_cast<int32_t>(x));
  };
  if (count_ == 0) return out;
  put(first_);
  if (more_)
    for (Run r : *more_) put(r);
  return out;
}

}  // namespace xtimer

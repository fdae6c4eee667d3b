#include "common/stacks/rank_set.h"

#include <algorithm>
#include <charconv>

namespace xtimer {

RankSet::RankSet(std::vector<int32_t> ranks) : ranks_(std::move(ranks)) {
  std::erase_if(ranks_, [](int32_t r) { return r < 0; });
  if (!std::is_sorted(ranks_.begin(), ranks_.end())) std::sort(ranks_.begin(), ranks_.end());
  ranks_.erase(std::unique(ranks_.begin(), ranks_.end()), ranks_.end());
}

RankSet RankSet::Range(int32_t first, int32_t end) {
  RankSet s;
  for (int32_t r = std::max<int32_t>(first, 0); r < end; ++r) s.ranks_.push_back(r);
  return s;
}

bool RankSet::Contains(int32_t rank) const { return std::binary_search(ranks_.begin(), ranks_.end(), rank); }

RankSet RankSet::Complement(int32_t world_size) const {
  RankSet out;
  auto it = ranks_.begin();
  for (int32_t r = 0; r < world_size; ++r) {
    while (it != ranks_.end() && *it < r) ++it;
    if (it == ranks_.end() || *it != r) out.ranks_.push_back(r);
  }
  return out;
}

RankSet RankSet::Minus(const RankSet& other) const {
  RankSet out;
  std::set_difference(ranks_.begin(), ranks_.end(), other.ranks_.begin(), other.ranks_.end(),
                      std::back_inserter(out.ranks_));
  return out;
}

std::string RankSet::Fold(size_t max_ranges) const {
  std::string out;
  size_t ranges = 0;
  for (size_t i = 0; i < ranks_.size();) {
    size_t j = i;
    while (j + 1 < ranks_.size() && ranks_[j + 1] == ranks_[j] + 1) ++j;
    if (max_ranges > 0 && ranges == max_ranges) {
      out += "/...+" + std::to_string(ranks_.size() - i);
      break;
    }
    if (!out.empty()) out += '/';
    out += std::to_string(ranks_[i]);
    if (j > i) out += '-' + std::to_string(ranks_[j]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

std::string RankSet::FoldComplement(int32_t world_size, size_t max_ranges) const {
  std::string out;
  size_t ranges = 0;
  int64_t left = world_size;  // ranks of the complement not yet written
  for (int32_t r : ranks_)
    if (r < world_size) --left;
  int64_t next = 0;              // the first rank not yet looked at
  auto gap = [&](int64_t end) {  // the complement's range [next, end)
    if (next >= end) return true;
    if (max_ranges > 0 && ranges == max_ranges) {
      out += "/...+" + std::to_string(left);
      return false;
    }
    if (!out.empty()) out += '/';
    out += std::to_string(next);
    if (end - 1 > next) out += '-' + std::to_string(end - 1);
    ++ranges;
    left -= end - next;
    return true;
  };
  for (int32_t r : ranks_) {
    if (r >= world_size) break;
    if (!gap(r)) return out;
    next = int64_t{r} + 1;
  }
  gap(world_size);
  return out;
}

std::optional<RankSet> RankSet::ParseFolded(std::string_view text) {
  RankSet out;
  if (text.empty()) return out;
  auto number = [](std::string_view s, int32_t* v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty() && *v >= 0;
  };
  while (true) {
    size_t slash = text.find('/');
    std::string_view part = text.substr(0, slash);
    size_t dash = part.find('-');
    int32_t a = 0, b = 0;
    if (!number(part.substr(0, dash), &a)) return std::nullopt;
    b = a;
    if (dash != std::string_view::npos && (!number(part.substr(dash + 1), &b) || b <= a)) return std::nullopt;
    if (!out.ranks_.empty() && a <= out.ranks_.back() + 1) return std::nullopt;  // not canonical
    if (static_cast<int64_t>(b) - a > (1 << 24)) return std::nullopt;            // absurd range
    for (int32_t r = a; r <= b; ++r) out.ranks_.push_back(r);
    if (slash == std::string_view::npos) break;
    text.remove_prefix(slash + 1);
  }
  return out;
}

std::string FoldRanks(std::span<const int32_t> ranks) {
  return RankSet(std::vector<int32_t>(ranks.begin(), ranks.end())).Fold();
}

}  // namespace xtimer

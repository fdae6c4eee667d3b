#include "preload/steps/step_book.h"

#include <algorithm>

namespace xtimer {

void StepBook::Begin(uint64_t step, uint64_t t_ns) {
  if (!open_.empty()) {
    Open& last = open_.back();
    if (t_ns <= last.facts.begin_ns) return;  // times go forward; a stale call is ignored
    last.facts.end_ns = t_ns;
  }
  open_.emplace_back();
  open_.back().facts.step = step;
  open_.back().facts.begin_ns = t_ns;
  while (open_.size() > kMaxOpen) {
    forced_.emplace_back();
    Finish(open_.front(), &forced_.back());
    open_.pop_front();
  }
}

StepBook::Open* StepBook::At(uint64_t t_ns) {
  for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
    if (t_ns >= it->facts.begin_ns) {
      if (it->facts.end_ns != 0 && t_ns >= it->facts.end_ns) return nullptr;  // between windows: cannot be
      return &*it;
    }
  }
  ++late_;
  return nullptr;
}

template <typename Fn>
void StepBook::Overlapping(uint64_t begin_ns, uint64_t end_ns, Fn&& fn) {
  if (end_ns <= begin_ns) return;
  if (open_.empty() || end_ns <= open_.front().facts.begin_ns) {
    ++late_;
    return;
  }
  for (Open& o : open_) {
    const uint64_t b = std::max(begin_ns, o.facts.begin_ns);
    const uint64_t e = o.facts.end_ns != 0 ? std::min(end_ns, o.facts.end_ns) : end_ns;
    if (b < e) fn(o, b, e);
  }
}

void StepBook::AddInterval(uint64_t start_ns, uint64_t end_ns) {
  Overlapping(start_ns, end_ns, [](Open& o, uint64_t b, uint64_t e) { o.intervals.emplace_back(b, e); });
}

void StepBook::AddKernel(uint32_t class_id, uint64_t start_ns, uint64_t dur_ns) {
  if (Open* o = At(start_ns)) {
    StepKernel& k = o->facts.kernels[class_id];
    k.n++;
    k.ns += dur_ns;
  }
}

void StepBook::AddIssueLatency(uint64_t issue_ns, uint64_t start_ns) {
  if (Open* o = At(issue_ns); o != nullptr && o->latencies.size() < kMaxLatencies)
    o->latencies.push_back(static_cast<int64_t>(start_ns) - static_cast<int64_t>(issue_ns));
}

void StepBook::AddColl(const StepColl& c) {
  if (Open* o = At(c.call_ns); o != nullptr && o->facts.colls.size() < kMaxColls) o->facts.colls.push_back(c);
}

void StepBook::AddSpan(SpanKind kind, uint64_t begin_ns, uint64_t end_ns) {
  Overlapping(begin_ns, end_ns, [kind](Open& o, uint64_t b, uint64_t e) {
    (kind == SpanKind::kGc ? o.facts.gc_ns : o.facts.data_ns) += e - b;
  });
}

void StepBook::AddSample(uint64_t t_ns, const std::string& frames) {
  if (Open* o = At(t_ns)) {
    auto it = o->samples.find(frames);
    if (it != o->samples.end()) {
      it->second++;
    } else if (o->samples.size() < 4 * kMaxSampleStacks) {
      o->samples.emplace(frames, 1);
    }
  }
}

void StepBook::Finish(Open& o, StepFacts* out) {
  StepFacts& f = o.facts;
  auto& iv = o.intervals;
  std::sort(iv.begin(), iv.end());
  uint64_t busy = 0, cur_b = 0, cur_e = 0;
  for (const auto& [b, e] : iv) {
    if (cur_e == 0 || b > cur_e) {
      busy += cur_e - cur_b;
      cur_b = b;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  busy += cur_e - cur_b;
  f.busy_ns = busy;
  if (!o.latencies.empty()) {
    auto mid = o.latencies.begin() + o.latencies.size() / 2;
    std::nth_element(o.latencies.begin(), mid, o.latencies.end());
    f.issue_latency_ns = std::max<int64_t>(*mid, 0);
  }
  std::sort(f.colls.begin(), f.colls.end(), [](const StepColl& a, const StepColl& b) { return a.call_ns < b.call_ns; });
  f.samples.assign(o.samples.begin(), o.samples.end());
  std::sort(f.samples.begin(), f.samples.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (f.samples.size() > kMaxSampleStacks) f.samples.resize(kMaxSampleStacks);
  *out = std::move(f);
}

bool StepBook::TakeFinished(uint64_t complete_to_ns, StepFacts* out) {
  if (!forced_.empty()) {
    *out = std::move(forced_.front());
    forced_.erase(forced_.begin());
    return true;
  }
  if (open_.empty()) return false;
  Open& o = open_.front();
  if (o.facts.end_ns == 0 || complete_to_ns < o.facts.end_ns) return false;
  Finish(o, out);
  open_.pop_front();
  return true;
}

bool StepBook::TakeEnded(StepFacts* out) { return TakeFinished(UINT64_MAX, out); }

}  // namespace xtimer

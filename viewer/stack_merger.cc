#include "viewer/stack_merger.h"

#include <algorithm>

namespace xtimer {
namespace {

// /proc/<pid>/stat state letters (proc(5)).
std::string StateName(std::string_view code) {
  if (code == "R") return "running";
  if (code == "S") return "sleeping";
  if (code == "D") return "uninterruptible (disk sleep)";
  if (code == "Z") return "zombie";
  if (code == "T") return "stopped";
  if (code == "t") return "tracing stop";
  if (code == "X" || code == "x") return "dead";
  if (code == "I") return "idle";
  if (code == "P") return "parked";
  if (code == "W") return "waking";
  return "unknown";
}

}  // namespace

RankSet MergedStacks::Reported() const {
  std::vector<int32_t> r;
  r.reserve(ranks.size());
  for (const RankSummary& s : ranks) r.push_back(s.rank);
  return RankSet(std::move(r));
}

StackMerger::StackMerger(MergeOptions options) {
  out_.world_size = std::clamp(options.world_size, 0, kMaxStackWorldSize);
}

void StackMerger::Skip(std::string_view source, std::string_view reason) {
  out_.skipped.push_back({std::string(source), std::string(reason)});
}

bool StackMerger::Add(const StackFile& file, std::string_view source, std::string* error) {
  auto fail = [&](std::string why) {
    Skip(source, why);
    *error = std::move(why);
    return false;
  };
  if (file.world_size < 1 || file.world_size > kMaxStackWorldSize)
    return fail("world_size " + std::to_string(file.world_size) + " is not valid");
  if (out_.world_size == 0) out_.world_size = file.world_size;
  if (file.world_size != out_.world_size)
    return fail("world_size " + std::to_string(file.world_size) + " disagrees with " + std::to_string(out_.world_size) +
                " of the other ranks");
  if (file.rank < 0 || file.rank >= out_.world_size)
    return fail("rank " + std::to_string(file.rank) + " is outside world_size " + std::to_string(out_.world_size));
  if (seen_.size() < static_cast<size_t>(out_.world_size)) seen_.resize(out_.world_size, 0);
  if (seen_[file.rank]) return fail("rank " + std::to_string(file.rank) + " was already read from another file");
  seen_[file.rank] = 1;

  FrameTable& frames = out_.frames;
  RankSummary& s = out_.ranks.emplace_back();
  s.rank = file.rank;
  s.source = source;
  s.host = file.host;
  s.pid = file.pid;
  s.reason = file.reason;
  s.process_state = file.process_state_code;
  s.trigger = file.trigger;
  for (const InflightOp& op : file.inflight_ops) {
    // Collectives and p2p (compared per communicator) and communicator set-up (the job's phase).
    if (op.comm.empty() && op.kind != "comm_init") continue;
    s.comm_ops.push_back({op.name, op.kind, op.comm, op.state, op.seq, op.comm_size, op.peer, op.in_flight_s});
  }

  const StackThread* main = file.MainThread();
  // Threads beyond this many do not get a memo (a hostile file may list millions).
  constexpr size_t kMemoThreads = 4096;
  if (last_python_.size() < std::min(file.threads.size(), kMemoThreads)) {
    last_python_.resize(std::min(file.threads.size(), kMemoThreads));
    last_native_.resize(last_python_.size());
    nodes_python_.resize(last_python_.size());
    nodes_native_.resize(last_python_.size());
  }
  // memo: the ids met last at this thread index, by depth; nullptr for none.
  auto intern = [&](const auto& f, std::vector<uint32_t>* memo, size_t depth) {
    if (memo == nullptr) return frames.Intern(f);
    if (depth < memo->size() && frames.Is((*memo)[depth], f)) return (*memo)[depth];
    uint32_t id = frames.Intern(f);
    if (depth < memo->size()) (*memo)[depth] = id;
    else memo->push_back(id);
    return id;
  };
  // At most one new node per frame (and one per thread for the GIL and state frames).
  size_t python_frames = 0, native_frames = 0;
  for (const StackThread& t : file.threads) {
    python_frames += t.python.size() + 1;
    native_frames += t.native.size() + 1;
  }
  out_.python.Reserve(python_frames);
  out_.native.Reserve(native_frames);
  for (size_t ti = 0; ti < file.threads.size(); ++ti) {
    const StackThread& t = file.threads[ti];
    bool is_main = &t == main;
    std::vector<uint32_t>* memo_py = ti < last_python_.size() ? &last_python_[ti] : nullptr;
    std::vector<uint32_t>* memo_native = ti < last_native_.size() ? &last_native_[ti] : nullptr;
    path_.clear();
    for (const PythonFrame& f : t.python) path_.push_back(intern(f, memo_py, path_.size()));
    if (is_main) s.main_python = path_;
    // Which thread holds the GIL matters when one rank is stuck in a C call holding it.
    if (!path_.empty() && t.holds_gil.value_or(false)) path_.push_back(frames.InternSynthetic("[holds GIL]", "python"));
    out_.python.AddPath(path_, file.rank, is_main, ti < nodes_python_.size() ? &nodes_python_[ti] : nullptr);

    path_.clear();
    for (const NativeFrame& f : t.native) path_.push_back(intern(f, memo_native, path_.size()));
    if (is_main) s.main_native = path_;
    // The thread state ends the native stack: R (spinning) and D (stuck in the kernel) stand out.
    if (!path_.empty() && !t.state.empty())
      path_.push_back(
          frames.InternSynthetic("[" + t.state.substr(0, 8) + ": " + StateName(t.state) + "]", "thread state"));
    out_.native.AddPath(path_, file.rank, is_main, ti < nodes_native_.size() ? &nodes_native_[ti] : nullptr);
  }
  return true;
}

void StackMerger::Absorb(StackMerger&& other) {
  MergedStacks& o = other.out_;
  if (out_.world_size == 0) out_.world_size = o.world_size;
  std::vector<uint32_t> map(o.frames.size());
  for (uint32_t i = 0; i < o.frames.size(); ++i) map[i] = out_.frames.InternCopy(o.frames[i]);
  out_.python.Absorb(o.python, map);
  out_.native.Absorb(o.native, map);
  if (seen_.size() < static_cast<size_t>(out_.world_size)) seen_.resize(out_.world_size, 0);
  for (RankSummary& s : o.ranks) {
    if (s.rank >= 0 && static_cast<size_t>(s.rank) < seen_.size() && seen_[s.rank]) {
      Skip(s.source, "rank " + std::to_string(s.rank) + " was already read from another file");
      continue;
    }
    if (s.rank >= 0 && static_cast<size_t>(s.rank) < seen_.size()) seen_[s.rank] = 1;
    for (uint32_t& f : s.main_python) f = map[f];
    for (uint32_t& f : s.main_native) f = map[f];
    out_.ranks.push_back(std::move(s));
  }
  for (SkippedInput& k : o.skipped) out_.skipped.push_back(std::move(k));
  other = StackMerger();
}

MergedStacks StackMerger::Finish() && {
  std::sort(out_.ranks.begin(), out_.ranks.end(),
            [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
  out_.python.Finish(out_.frames);
  out_.native.Finish(out_.frames);
  return std::move(out_);
}

}  // namespace xtimer

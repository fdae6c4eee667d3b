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
  if (!BeginRank(file, source, error)) return false;
  for (size_t i = 0; i < file.threads.size(); ++i) AddThread(file.threads[i], i);
  EndRank();
  return true;
}

bool StackMerger::BeginRank(const StackFile& file, std::string_view source, std::string* error) {
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
    // Kinds this version does not know are not compared.
    OpKind kind;
    if (!ParseOpKind(op.kind, &kind)) continue;
    if (kind == OpKind::kKernel && op.state == "running") s.kernels.push_back({op.name, op.stream, op.in_flight_s});
    if (kind != OpKind::kCommInit && (op.comm.empty() || !IsCommunication(kind))) continue;
    s.comm_ops.push_back({op.name, kind, op.comm, op.state, op.seq, op.comm_size, op.peer, op.in_flight_s, op.bytes});
  }
  std::stable_sort(s.kernels.begin(), s.kernels.end(),
                   [](const GpuWork& a, const GpuWork& b) { return a.in_flight_s > b.in_flight_s; });
  if (s.kernels.size() > RankSummary::kMaxKernels) s.kernels.resize(RankSummary::kMaxKernels);
  open_pid_ = file.pid;
  marked_.set = pid_thread_.set = first_thread_.set = false;
  return true;
}

void StackMerger::AddThread(const StackThread& t, size_t ti) {
  FrameTable& frames = out_.frames;
  const int32_t rank = out_.ranks.back().rank;
  // Threads beyond this many do not get a memo (a hostile file may list millions).
  constexpr size_t kMemoThreads = 4096;
  if (ti < kMemoThreads && last_python_.size() <= ti) {
    size_t n = std::min(std::max(ti + 1, last_python_.size() * 2), kMemoThreads);
    last_python_.resize(n);
    last_native_.resize(n);
    nodes_python_.resize(n);
    nodes_native_.resize(n);
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
  // Which of the candidates for the main thread this thread is (the first of each kind).
  MainCandidate* main = nullptr;
  if (t.main && !marked_.set) main = &marked_;
  else if (t.tid == open_pid_ && !pid_thread_.set) main = &pid_thread_;
  else if (!first_thread_.set) main = &first_thread_;
  // At most one new node per frame (and one per thread for the GIL and state frames).
  out_.python.Reserve(t.python.size() + 1);
  out_.native.Reserve(t.native.size() + 1);
  const bool has_memo = ti < last_python_.size();

  path_.clear();
  for (const PythonFrame& f : t.python)
    path_.push_back(intern(f, has_memo ? &last_python_[ti] : nullptr, path_.size()));
  if (main != nullptr) main->python = path_;
  // Which thread holds the GIL matters when one rank is stuck in a C call holding it.
  if (!path_.empty() && t.holds_gil.value_or(false)) path_.push_back(frames.InternSynthetic("[holds GIL]", "python"));
  // The name Python gave the thread ends both of its stacks (where py-spy names a thread).
  uint32_t name_frame = 0;
  if (!t.python_name.empty()) name_frame = frames.InternSynthetic("[thread: " + t.python_name + "]", kThreadNameSource);
  if (!path_.empty() && !t.python_name.empty()) path_.push_back(name_frame);
  uint32_t python_leaf = out_.python.AddPath(path_, rank, has_memo ? &nodes_python_[ti] : nullptr);

  path_.clear();
  for (const NativeFrame& f : t.native)
    path_.push_back(intern(f, has_memo ? &last_native_[ti] : nullptr, path_.size()));
  if (main != nullptr) main->native = path_;
  // The thread state ends the native stack: R (spinning) and D (stuck in the kernel) stand out.
  if (!path_.empty() && !t.state.empty())
    path_.push_back(
        frames.InternSynthetic("[" + t.state.substr(0, 8) + ": " + StateName(t.state) + "]", "thread state"));
  if (!path_.empty() && !t.python_name.empty()) path_.push_back(name_frame);
  uint32_t native_leaf = out_.native.AddPath(path_, rank, has_memo ? &nodes_native_[ti] : nullptr);

  if (main != nullptr) {
    main->set = true;
    main->python_leaf = python_leaf;
    main->native_leaf = native_leaf;
  }
}

void StackMerger::EndRank() {
  MainCandidate* main = marked_.set ? &marked_ : pid_thread_.set ? &pid_thread_ : &first_thread_;
  if (!main->set) return;  // no thread
  RankSummary& s = out_.ranks.back();
  s.main_python = main->python;
  s.main_native = main->native;
  out_.python.MarkMainEnd(main->python_leaf);
  out_.native.MarkMainEnd(main->native_leaf);
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

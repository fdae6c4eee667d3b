#include "viewer/verdict.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "viewer/frame_label.h"

namespace xtimer {
namespace {

constexpr size_t kLeafFrames = 8;     // frames kept per group / suspect in verdict.json
constexpr size_t kSummaryFrames = 3;  // frames in a terminal line
// Missing ranks are suspects one by one up to this many; beyond it (most of a job did not dump, or
// a file claims an absurd world size) they are listed in ranks_missing and counted in a note.
constexpr size_t kMaxMissingSuspects = 256;

const std::vector<uint32_t>& Signature(const RankSummary& r, StackSource* by = nullptr) {
  StackSource source = !r.main_python.empty()   ? StackSource::kPython
                       : !r.main_native.empty() ? StackSource::kNative
                                                : StackSource::kNone;
  if (by != nullptr) *by = source;
  return source == StackSource::kPython ? r.main_python : r.main_native;
}

std::vector<std::string> LeafFrames(const FrameTable& frames, const std::vector<uint32_t>& sig, size_t n) {
  std::vector<std::string> out;
  for (size_t i = sig.size(); i > 0 && out.size() < n; --i) out.push_back(PrintableName(frames[sig[i - 1]].Short()));
  return out;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep, size_t n = SIZE_MAX) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < n; ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

// "rank 2" / "ranks 0-1/3".
std::string Ranks(const RankSet& r) { return (r.size() == 1 ? "rank " : "ranks ") + r.Fold(16); }
const char* IsAre(const RankSet& r) { return r.size() == 1 ? "is" : "are"; }

std::vector<VerdictGroup> Group(const MergedStacks& m) {
  std::map<std::pair<StackSource, std::vector<uint32_t>>, std::vector<int32_t>> by_sig;
  for (const RankSummary& r : m.ranks) {
    StackSource by;
    const std::vector<uint32_t>& sig = Signature(r, &by);
    by_sig[{by, sig}].push_back(r.rank);
  }
  std::vector<VerdictGroup> groups;
  for (auto& [key, ranks] : by_sig) {
    VerdictGroup& g = groups.emplace_back();
    g.ranks = RankSet(std::move(ranks));
    g.by = key.first;
    g.signature = key.second;
    g.leaf_frames = LeafFrames(m.frames, g.signature, kLeafFrames);
  }
  std::stable_sort(groups.begin(), groups.end(), [](const VerdictGroup& a, const VerdictGroup& b) {
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
    return a.ranks.ranks().front() < b.ranks.ranks().front();
  });
  return groups;
}

// "ncclAllReduce of 8 MiB" (the name alone when the stack file gave no size).
std::string CallName(const std::string& op, int64_t bytes) {
  if (bytes < 0) return op;
  char buf[48];
  if (bytes >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, " of %.4g MiB", double(bytes) / double(1 << 20));
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, " of %.4g KiB", double(bytes) / 1024.0);
  else std::snprintf(buf, sizeof buf, " of %lld B", static_cast<long long>(bytes));
  return op + buf;
}

std::vector<CommVerdict> CompareComms(const MergedStacks& m) {
  struct Pos {
    int64_t seq;
    std::string op;
    int64_t bytes;
    std::string state;
  };
  std::map<std::string, std::map<int32_t, Pos>> pos;  // comm -> rank -> oldest collective in flight
  std::map<std::string, int64_t> size;
  for (const RankSummary& r : m.ranks) {
    for (const CommOp& op : r.comm_ops) {
      // p2p sequence numbers count different calls on each side: only collectives compare.
      if (op.kind != OpKind::kCollective || op.seq < 0) continue;
      auto [it, fresh] = pos[op.comm].try_emplace(r.rank, Pos{op.seq, op.name, op.bytes, op.state});
      if (!fresh && op.seq < it->second.seq) it->second = {op.seq, op.name, op.bytes, op.state};
      size[op.comm] = std::max(size[op.comm], op.comm_size);
    }
  }
  RankSet reported = m.Reported();
  std::vector<CommVerdict> out;
  for (auto& [comm, ranks] : pos) {
    CommVerdict& c = out.emplace_back();
    c.comm = comm;
    c.comm_size = size[comm];
    for (auto& [rank, p] : ranks)
      if (p.seq > c.seq) c.seq = p.seq, c.op = p.op;
    std::vector<int32_t> waiting, in;
    for (auto& [rank, p] : ranks) {
      in.push_back(rank);
      if (p.seq == c.seq) waiting.push_back(rank);
      else c.behind[rank] = p.seq;
    }
    c.waiting = RankSet(std::move(waiting));
    // Some ranks' collective #seq runs on their GPU, others' has not started: those are behind on
    // their GPU (work before it on their streams never finishes), however far their host got.
    std::vector<int32_t> not_started;
    bool one_runs = false;
    for (auto& [rank, p] : ranks) {
      if (p.seq != c.seq) continue;
      if (p.state == "running") one_runs = true;
      else if (p.state == "pending") not_started.push_back(rank);
    }
    if (one_runs) c.not_started = RankSet(std::move(not_started));
    // Ranks at one sequence number in different calls: the oldest such sequence number.
    std::map<int64_t, std::map<std::string, std::vector<int32_t>>> calls;  // seq -> call -> ranks
    for (auto& [rank, p] : ranks) calls[p.seq][CallName(p.op, p.bytes)].push_back(rank);
    for (auto& [seq, by_call] : calls) {
      if (by_call.size() < 2) continue;
      c.differ_seq = seq;
      for (auto& [call, rs] : by_call) c.differ.emplace_back(call, RankSet(rs));
      std::stable_sort(c.differ.begin(), c.differ.end(), [](const auto& a, const auto& b) {
        if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
        return a.second.ranks().front() < b.second.ranks().front();
      });
      break;
    }
    RankSet participants(std::move(in));
    if (c.comm_size == m.world_size) {
      // It spans the job: every reporting rank is a member and can be named.
      c.absent = reported.Minus(participants);
    } else if (c.comm_size > static_cast<int64_t>(participants.size())) {
      c.absent_unnamed = c.comm_size - static_cast<int64_t>(participants.size());
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const CommVerdict& a, const CommVerdict& b) {
    if (a.InStep() != b.InStep()) return !a.InStep();
    return a.waiting.size() > b.waiting.size();
  });
  return out;
}

// "; its GPU waits at <kernel> (stream 0x..., no progress for 12.3 s)": the rank's longest-running
// kernel that is not NCCL's (an NCCL kernel that has not started waits for the others), or "" when
// its stack file lists none.
std::string GpuWaitsAt(const MergedStacks& m, int32_t rank) {
  auto it = std::lower_bound(m.ranks.begin(), m.ranks.end(), rank,
                             [](const RankSummary& s, int32_t v) { return s.rank < v; });
  if (it == m.ranks.end() || it->rank != rank) return "";
  auto k_it = std::find_if(it->kernels.begin(), it->kernels.end(),
                           [](const GpuWork& k) { return k.name.rfind("nccl", 0) != 0; });
  if (k_it == it->kernels.end()) return "";
  const GpuWork& k = *k_it;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", k.in_flight_s);
  return "; its GPU waits at " + PrintableName(k.name, 160) + " (stream " + PrintableName(k.stream, 24) +
         ", no progress for " + secs + " s)";
}

// "load_batch (train.py:88) <- train_step (train.py:140)" for a set of ranks, per distinct stack.
std::string WhereAre(const MergedStacks& m, const RankSet& ranks) {
  std::map<std::vector<uint32_t>, std::vector<int32_t>> by_sig;
  for (int32_t r : ranks.ranks()) {
    auto it =
        std::lower_bound(m.ranks.begin(), m.ranks.end(), r, [](const RankSummary& s, int32_t v) { return s.rank < v; });
    if (it == m.ranks.end() || it->rank != r) continue;
    by_sig[Signature(*it)].push_back(r);
  }
  if (by_sig.size() == 1) return Join(LeafFrames(m.frames, by_sig.begin()->first, kSummaryFrames), " <- ");
  std::vector<std::string> parts;
  for (auto& [sig, rs] : by_sig) {
    if (parts.size() == 3) {
      parts.push_back("...");
      break;
    }
    parts.push_back(Ranks(RankSet(rs)) + ": " + Join(LeafFrames(m.frames, sig, kSummaryFrames), " <- "));
  }
  return Join(parts, "; ");
}

// Pretty-printed like dump(2), except that an array of numbers or strings stays on one line: a
// 4,096-rank job's rank lists would otherwise take a line per rank.
void Dump(const nlohmann::ordered_json& j, int indent, std::string& out) {
  using J = nlohmann::ordered_json;
  auto dump = [](const J& x) { return x.dump(-1, ' ', false, J::error_handler_t::replace); };
  auto pad = [&](int n) { out.append(static_cast<size_t>(n), ' '); };
  if (j.is_object() && !j.empty()) {
    out += "{\n";
    size_t i = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++i) {
      pad(indent + 2);
      out += dump(J(it.key()));
      out += ": ";
      Dump(it.value(), indent + 2, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    pad(indent);
    out += '}';
  } else if (j.is_array() && !j.empty() &&
             std::any_of(j.begin(), j.end(), [](const J& e) { return e.is_structured(); })) {
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      pad(indent + 2);
      Dump(j[i], indent + 2, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    pad(indent);
    out += ']';
  } else {
    out += dump(j);
  }
}

}  // namespace

Verdict JudgeStacks(const MergedStacks& m) {
  Verdict v;
  v.world_size = m.world_size;
  v.reported = m.Reported();
  v.missing = m.Missing();
  v.skipped = m.skipped;
  v.groups = Group(m);
  v.comms = CompareComms(m);

  std::map<int32_t, Suspect> suspects;
  auto suspect = [&](int32_t rank, SuspectKind kind, std::string reason) {
    Suspect& s = suspects[rank];
    s.rank = rank;
    if (std::find(s.kinds.begin(), s.kinds.end(), kind) != s.kinds.end()) return;
    s.kinds.push_back(kind);
    s.reason += (s.reason.empty() ? "" : "; ") + reason;
  };

  // The phase. In set-up, the ranks that are not in it (and the missing ones) are who the others
  // wait for: a rank still loading data or stuck in the rendezvous.
  std::vector<int32_t> setup;
  for (const RankSummary& r : m.ranks)
    for (const CommOp& op : r.comm_ops)
      if (op.kind == OpKind::kCommInit) {
        setup.push_back(r.rank);
        if (v.setup_call.empty()) v.setup_call = op.name;
        break;
      }
  v.setup_waiting = RankSet(std::move(setup));
  v.phase = !v.setup_waiting.empty() ? VerdictPhase::kSetup
            : !v.comms.empty()       ? VerdictPhase::kStep
                                     : VerdictPhase::kUnknown;
  const RankSet not_in_setup = v.phase == VerdictPhase::kSetup ? v.reported.Minus(v.setup_waiting) : RankSet();
  for (int32_t r : not_in_setup.ranks())
    suspect(
        r, SuspectKind::kNotInSetup,
        "not in communicator set-up (" + Ranks(v.setup_waiting) + " wait in " + PrintableName(v.setup_call, 80) + ")");

  if (v.missing.size() <= kMaxMissingSuspects) {
    for (int32_t r : v.missing.ranks()) suspect(r, SuspectKind::kMissing, "wrote no stack file");
  } else {
    v.notes.push_back(std::to_string(v.missing.size()) + " ranks wrote no stack file (" + v.missing.Fold(16) +
                      "); too many to name each as a suspect, see ranks_missing");
  }
  for (const CommVerdict& c : v.comms) {
    std::string in = c.op + " #" + std::to_string(c.seq) + " on comm " + PrintableName(c.comm, 64);
    for (int32_t r : c.absent.ranks())
      suspect(r, SuspectKind::kAbsent, "not in " + in + " (" + Ranks(c.waiting) + " wait in it)");
    for (size_t i = 1; i < c.differ.size(); ++i)
      for (int32_t r : c.differ[i].second.ranks())
        suspect(r, SuspectKind::kOtherCall,
                "in " + PrintableName(c.differ[i].first, 80) + " #" + std::to_string(c.differ_seq) + " on comm " +
                    PrintableName(c.comm, 64) + " while " + Ranks(c.differ[0].second) + " " +
                    IsAre(c.differ[0].second) + " in " + PrintableName(c.differ[0].first, 80) + " #" +
                    std::to_string(c.differ_seq));
    if (!c.not_started.empty()) {
      const RankSet running = c.waiting.Minus(c.not_started);
      for (int32_t r : c.not_started.ranks())
        suspect(r, SuspectKind::kNotStarted,
                "its " + in + " has not started on its GPU while " + Ranks(running) + " " + IsAre(running) + " in it" +
                    GpuWaitsAt(m, r));
    }
    for (auto& [r, seq] : c.behind)
      suspect(r, SuspectKind::kBehind,
              "in #" + std::to_string(seq) + " on comm " + PrintableName(c.comm, 64) + " while " + Ranks(c.waiting) +
                  " " + IsAre(c.waiting) + " in #" + std::to_string(c.seq));
  }
  // A majority exists when one group is strictly the largest; a tie names nobody by stack alone.
  bool majority = v.groups.size() == 1 || (v.groups.size() > 1 && v.groups[0].ranks.size() > v.groups[1].ranks.size());
  if (majority && v.groups.size() > 1) {
    std::string where = Join(v.groups[0].leaf_frames, " <- ", kSummaryFrames);
    for (size_t g = 1; g < v.groups.size(); ++g)
      for (int32_t r : v.groups[g].ranks.ranks())
        suspect(r, SuspectKind::kStackDiffers,
                "main thread is not where " + Ranks(v.groups[0].ranks) + " are (" + where + ")");
  }
  for (auto& [rank, s] : suspects) {
    auto it = std::lower_bound(m.ranks.begin(), m.ranks.end(), rank,
                               [](const RankSummary& x, int32_t r) { return x.rank < r; });
    if (it != m.ranks.end() && it->rank == rank) s.frames = LeafFrames(m.frames, Signature(*it), kLeafFrames);
    v.suspects.push_back(std::move(s));
  }
  v.all_agree = v.suspects.empty() && v.groups.size() <= 1 && v.missing.empty();

  for (const RankSummary& r : m.ranks)
    if (r.process_state == "D" || r.process_state == "Z" || r.process_state == "T")
      v.notes.push_back("rank " + std::to_string(r.rank) + " process state is " + PrintableName(r.process_state, 4) +
                        (r.process_state == "D" ? " (uninterruptible: usually I/O or a driver call)" : ""));
  if (!majority && v.groups.size() > 1) v.notes.push_back("no majority: the ranks split into groups of equal size");
  return v;
}

std::vector<std::string> SummaryLines(const Verdict& v, const MergedStacks& m) {
  std::vector<std::string> summary;
  std::string head = std::to_string(v.reported.size()) + " of " + std::to_string(v.world_size) + " ranks reported (" +
                     v.reported.Fold(16) + "); missing: " + (v.missing.empty() ? "none" : v.missing.Fold(16));
  if (!v.skipped.empty()) head += "; " + std::to_string(v.skipped.size()) + " file(s) skipped";
  summary.push_back(head);
  if (v.phase == VerdictPhase::kSetup) {
    RankSet others = v.reported.Minus(v.setup_waiting);
    std::string line = Ranks(v.setup_waiting) + " wait in " + PrintableName(v.setup_call, 80) +
                       " (communicator set-up: the job has not reached its first step)";
    if (!others.empty()) line += "; " + Ranks(others) + " " + IsAre(others) + " not in it: " + WhereAre(m, others);
    if (!v.missing.empty()) line += "; never arrived (no stack file): " + v.missing.Fold(16);
    summary.push_back(line);
  }
  size_t comm_lines = 0;
  for (const CommVerdict& c : v.comms) {
    if (c.InStep() || comm_lines == 3) continue;
    ++comm_lines;
    std::string line = Ranks(c.waiting) + " wait in " + PrintableName(c.op, 80) + " #" + std::to_string(c.seq) +
                       " (comm " + PrintableName(c.comm, 64) + ")";
    if (!c.absent.empty())
      line += "; " + Ranks(c.absent) + " " + IsAre(c.absent) + " not in it: " + WhereAre(m, c.absent);
    if (!c.behind.empty()) {
      std::vector<int32_t> b;
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (auto& [r, seq] : c.behind) b.push_back(r), lo = std::min(lo, seq), hi = std::max(hi, seq);
      RankSet behind(std::move(b));
      line += "; " + Ranks(behind) + " " + IsAre(behind) + " behind (in #" + std::to_string(lo) +
              (hi != lo ? "-#" + std::to_string(hi) : "") + "): " + WhereAre(m, behind);
    }
    if (!c.not_started.empty())
      line += "; " + Ranks(c.not_started) + " " + IsAre(c.not_started) + " in it but not started on the GPU";
    if (!c.differ.empty()) {
      line += "; in different collectives at #" + std::to_string(c.differ_seq) + ":";
      for (size_t i = 0; i < c.differ.size() && i < 4; ++i)
        line +=
            std::string(i ? "," : "") + " " + Ranks(c.differ[i].second) + " in " + PrintableName(c.differ[i].first, 80);
    }
    if (c.absent_unnamed > 0)
      line += "; " + std::to_string(c.absent_unnamed) + " of its " + std::to_string(c.comm_size) +
              " members did not report it";
    summary.push_back(line);
  }
  if (comm_lines == 0) {
    for (size_t g = 0; g < v.groups.size() && g < 4; ++g)
      summary.push_back(Ranks(v.groups[g].ranks) + ": " + Join(v.groups[g].leaf_frames, " <- ", kSummaryFrames));
    if (v.groups.size() > 4) summary.push_back("... " + std::to_string(v.groups.size() - 4) + " more groups");
  }
  if (v.suspects.empty()) {
    if (v.all_agree) summary.push_back("no suspect: every rank is in the same place");
    else if (v.groups.size() > 1)
      summary.push_back("no suspect: the ranks split evenly and no collective tells who is behind");
    else
      summary.push_back("no suspect named: every reported rank is in the same place, but " +
                        std::to_string(v.missing.size()) + " ranks wrote no stack file");
  } else {
    std::vector<std::string> names;
    for (const Suspect& s : v.suspects) {
      if (names.size() == 8) {
        names.push_back("and " + std::to_string(v.suspects.size() - 8) + " more");
        break;
      }
      std::string kinds;
      for (SuspectKind k : s.kinds) kinds += (kinds.empty() ? "" : ", ") + std::string(Name(k));
      names.push_back("rank " + std::to_string(s.rank) + " (" + kinds + ")");
    }
    summary.push_back("suspects: " + Join(names, ", "));
  }
  for (const std::string& n : v.notes) summary.push_back("note: " + n);
  return summary;
}

Verdict ComputeVerdict(const MergedStacks& merged) {
  Verdict v = JudgeStacks(merged);
  v.summary = SummaryLines(v, merged);
  return v;
}

// A communicator's ranks in different collectives at one sequence number, for verdict.json.
static nlohmann::ordered_json DifferentCalls(const CommVerdict& c) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [call, ranks] : c.differ)
    out.push_back({{"seq", c.differ_seq}, {"call", call}, {"ranks", ranks.ranks()}});
  return out;
}

std::string VerdictToJson(const Verdict& v) {
  using J = nlohmann::ordered_json;
  J j;
  j["format"] = "xtimer-verdict";
  j["version"] = 1;
  j["kind"] = "hang";
  j["world_size"] = v.world_size;
  j["phase"] = Name(v.phase);
  if (v.phase == VerdictPhase::kSetup) j["setup"] = {{"call", v.setup_call}, {"waiting", v.setup_waiting.ranks()}};
  j["ranks_reported"] = v.reported.ranks();
  j["ranks_missing"] = v.missing.ranks();
  j["ranks_reported_folded"] = v.reported.Fold();
  j["ranks_missing_folded"] = v.missing.Fold();
  j["skipped"] = J::array();
  for (const SkippedInput& s : v.skipped) j["skipped"].push_back({{"file", s.source}, {"reason", s.reason}});
  j["groups"] = J::array();
  for (const VerdictGroup& g : v.groups)
    j["groups"].push_back({{"ranks", g.ranks.ranks()},
                           {"ranks_folded", g.ranks.Fold()},
                           {"by", Name(g.by)},
                           {"leaf_frames", g.leaf_frames}});
  j["communicators"] = J::array();
  for (const CommVerdict& c : v.comms) {
    J behind = J::array();
    for (auto& [r, seq] : c.behind) behind.push_back({{"rank", r}, {"seq", seq}});
    j["communicators"].push_back({{"comm", c.comm},
                                  {"op", c.op},
                                  {"seq", c.seq},
                                  {"comm_size", c.comm_size},
                                  {"waiting", c.waiting.ranks()},
                                  {"behind", behind},
                                  {"absent", c.absent.ranks()},
                                  {"absent_unnamed", c.absent_unnamed},
                                  {"different_calls", DifferentCalls(c)},
                                  {"not_started", c.not_started.ranks()},
                                  {"in_step", c.InStep()}});
  }
  j["suspects"] = J::array();
  for (const Suspect& s : v.suspects) {
    J kinds = J::array();
    for (SuspectKind k : s.kinds) kinds.push_back(Name(k));
    j["suspects"].push_back({{"rank", s.rank}, {"reason", s.reason}, {"kinds", kinds}, {"frames", s.frames}});
  }
  j["all_agree"] = v.all_agree;
  j["notes"] = v.notes;
  j["summary"] = v.summary;
  // Input strings (file names) may not be UTF-8: Dump replaces rather than throws.
  std::string out;
  Dump(j, 0, out);
  return out + "\n";
}

}  // namespace xtimer

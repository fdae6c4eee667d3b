// Who is out of step: the verdict over a merge. Ranks are grouped by where their main thread is
// (its Python stack, or its native stack when it runs no Python); in-flight collectives are
// compared per communicator by sequence number. Suspects are the ranks that differ from the
// majority group, that are behind on a communicator (lowest sequence), that are not in a
// collective the others wait in, or that wrote no stack at all. Judged by JudgeStacks, told on the
// terminal in a few lines by SummaryLines; written as verdict.json (viewer/README.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/kinds.h"
#include "common/stacks/rank_set.h"
#include "viewer/merged_stacks.h"

namespace xtimer {

struct VerdictGroup {
  RankSet ranks;
  StackSource by = StackSource::kNone;   // the stack the ranks are grouped by
  std::vector<uint32_t> signature;       // frame ids, root first
  std::vector<std::string> leaf_frames;  // deepest first, "func (file:line)"
};

// The in-flight collectives of one communicator.
struct CommVerdict {
  std::string comm;
  std::string op;    // the collective the most advanced ranks are in
  int64_t seq = -1;  // its sequence number (the highest seen on this communicator)
  int64_t comm_size = -1;
  RankSet waiting;                    // ranks in op #seq
  std::map<int32_t, int64_t> behind;  // rank -> the (older) sequence it is in
  RankSet absent;                     // reporting members with no collective in flight on it
  int64_t absent_unnamed = 0;         // members not in it that cannot be named (a sub-communicator)
  // Ranks at one sequence number (the oldest such) in different collectives (operation or
  // size): NCCL pairs them anyway. Each call ("ncclAllReduce of 8 MiB") with its ranks, the
  // largest group first (on a tie, the one with the lowest rank).
  int64_t differ_seq = -1;
  std::vector<std::pair<std::string, RankSet>> differ;
  // Ranks in op #seq whose collective has not started on their GPU while others' runs: their GPU
  // has not reached it (work queued before it on their streams does not finish).
  RankSet not_started;
  bool InStep() const {
    return behind.empty() && absent.empty() && absent_unnamed == 0 && differ.empty() && not_started.empty();
  }
};

struct Suspect {
  int32_t rank = -1;
  std::vector<SuspectKind> kinds;  // in the order they were found
  std::string reason;
  std::vector<std::string> frames;  // the rank's main-thread leaf frames, deepest first
};

struct Verdict {
  int32_t world_size = 0;
  // kSetup: some rank waits in NCCL communicator set-up (ncclCommInitRank, ncclCommSplit, ...)
  // for ranks that have not arrived; kStep: ranks are in collectives; kUnknown: neither.
  VerdictPhase phase = VerdictPhase::kUnknown;
  RankSet setup_waiting;   // the ranks in communicator set-up
  std::string setup_call;  // what they wait in
  RankSet reported, missing;
  std::vector<SkippedInput> skipped;
  std::vector<VerdictGroup> groups;  // largest first
  std::vector<CommVerdict> comms;    // out-of-step communicators first
  std::vector<Suspect> suspects;     // ascending rank
  bool all_agree = false;
  std::vector<std::string> notes;
  std::vector<std::string> summary;  // the terminal lines (SummaryLines); empty after JudgeStacks
};

// Who is out of step, and why. Leaves `summary` empty.
Verdict JudgeStacks(const MergedStacks& merged);

// The terminal lines of `verdict` (judged over `merged`, which says where the named ranks are).
std::vector<std::string> SummaryLines(const Verdict& verdict, const MergedStacks& merged);

// JudgeStacks, then its summary lines.
Verdict ComputeVerdict(const MergedStacks& merged);

// verdict.json, pretty-printed.
std::string VerdictToJson(const Verdict& verdict);

}  // namespace xtimer

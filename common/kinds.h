// The words that cross components, as types. Each enum has one name per value: the text the
// files and messages carry (docs/formats.md), written by one component and read by another.
//   OpKind       the preloaded library's operations: summary classes, stack files' in-flight ops,
//                the agent's reports, the /metrics `kind` label, the verdict's communicators.
//   VerdictPhase, SuspectKind, StackSource   the verdict's `phase`, a suspect's `kinds` and a
//                group's `by` (verdict.json).
// Header-only, no dependency: safe inside the preloaded library.
#pragma once

#include <cstdint>
#include <string_view>

namespace xtimer {

enum class OpKind : uint8_t {
  // Operations the library times, each with its own summary classes.
  kKernel = 0,
  kMatmul,
  kCollective,
  kP2p,
  kMemcpy,
  // A host thread blocked (in-flight ops only): in a synchronising call, waiting for the GPU...
  kSync,
  // ... or in NCCL communicator set-up (ncclCommInitRank and its relatives), waiting for the
  // communicator's other ranks.
  kCommInit,
};
// The timed kinds are the first ones: the summary's per-kind classes are indexed by them.
inline constexpr int kTimedOpKinds = static_cast<int>(OpKind::kMemcpy) + 1;

// Collectives and p2p: the ops on a communicator, with bytes and bandwidth.
constexpr bool IsCommunication(OpKind k) { return k == OpKind::kCollective || k == OpKind::kP2p; }

enum class VerdictPhase : uint8_t {
  kSetup,    // some rank waits in communicator set-up for ranks that have not arrived
  kStep,     // ranks are in collectives
  kUnknown,  // neither
};

// Why a rank is a suspect; a suspect may have several.
enum class SuspectKind : uint8_t {
  kMissing,       // wrote no stack file
  kAbsent,        // not in a collective the others wait in
  kBehind,        // in an older collective of the communicator
  kNotInSetup,    // not in the communicator set-up the others wait in
  kStackDiffers,  // main thread not where the majority's is
  kOtherCall,     // in another collective (operation or size) than the others at the same sequence number
  kNotStarted,    // its collective has not started on its GPU while the others' have (its GPU is behind)
};

// Which stack of the main thread a verdict group compares ranks by.
enum class StackSource : uint8_t {
  kPython,
  kNative,  // the process runs no Python
  kNone,    // no main-thread frames
};

constexpr const char* Name(OpKind k) {
  switch (k) {
    case OpKind::kKernel: return "kernel";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kCollective: return "collective";
    case OpKind::kP2p: return "p2p";
    case OpKind::kMemcpy: return "memcpy";
    case OpKind::kSync: return "sync";
    case OpKind::kCommInit: return "comm_init";
  }
  return "kernel";
}

constexpr const char* Name(VerdictPhase p) {
  switch (p) {
    case VerdictPhase::kSetup: return "setup";
    case VerdictPhase::kStep: return "step";
    case VerdictPhase::kUnknown: return "unknown";
  }
  return "unknown";
}

constexpr const char* Name(SuspectKind k) {
  switch (k) {
    case SuspectKind::kMissing: return "missing";
    case SuspectKind::kAbsent: return "absent";
    case SuspectKind::kBehind: return "behind";
    case SuspectKind::kNotInSetup: return "not_in_setup";
    case SuspectKind::kStackDiffers: return "stack_differs";
    case SuspectKind::kOtherCall: return "other_call";
    case SuspectKind::kNotStarted: return "not_started";
  }
  return "missing";
}

constexpr const char* Name(StackSource s) {
  switch (s) {
    case StackSource::kPython: return "python";
    case StackSource::kNative: return "native";
    case StackSource::kNone: return "none";
  }
  return "none";
}

// The op kind a name in a file or message stands for; false for a name this version does not
// know (a newer writer's), which readers skip or pass on as text.
constexpr bool ParseOpKind(std::string_view name, OpKind* kind) {
  for (int k = 0; k <= static_cast<int>(OpKind::kCommInit); ++k) {
    if (name == Name(static_cast<OpKind>(k))) {
      *kind = static_cast<OpKind>(k);
      return true;
    }
  }
  return false;
}

// Whether `name` (from a file or message) is the name of `kind`.
constexpr bool IsKind(std::string_view name, OpKind kind) { return name == Name(kind); }

}  // namespace xtimer

// Why an upload was refused: the fixed label values of
// xtimer_collector_uploads_refused_total{reason} (collector/README.md, "Metrics"). The core
// counts each refusal under its reason; the metrics name them in this order. Header only.
#pragma once

namespace xtimer::collector {

enum class Refusal {
  kUnknownSession,
  kTooLarge,
  kBadRank,
  kUnknownRound,
  kRoundClosed,
  kParse,
  kRankMismatch,
  kWorldMismatch,
  kMerge,
  kCount
};
inline constexpr int kRefusalCount = static_cast<int>(Refusal::kCount);
inline constexpr const char* kRefusalNames[kRefusalCount] = {"unknown_session", "too_large",      "bad_rank",
                                                             "unknown_round",   "round_closed",   "parse",
                                                             "rank_mismatch",   "world_mismatch", "merge"};

}  // namespace xtimer::collector

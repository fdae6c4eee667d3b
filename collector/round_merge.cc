#include "collector/round_merge.h"

#include "common/log.h"
#include "common/stacks/rank_set.h"
#include "viewer/merge_output.h"
#include "viewer/verdict.h"

namespace xtimer::collector {

MergedRound MergeRound(const DumpRound& round, DumpRound::Closed closed, RoundInfo info, unsigned output_formats,
                       StackFileWriter* writer) {
  info.finished = true;
  info.timed_out = !closed.complete;
  info.world_size = closed.world;
  MergedStacks merged = std::move(*closed.merger).Finish();
  closed.merger.reset();
  if (merged.world_size == 0) merged.world_size = closed.world;
  Verdict verdict = ComputeVerdict(merged);
  info.ranks_reported = verdict.reported.Fold(64);
  info.ranks_missing = verdict.missing.Fold(64);
  info.reported_count = verdict.reported.size();
  info.missing_count = verdict.missing.size();
  info.summary = verdict.summary;
  for (const Suspect& s : verdict.suspects) {
    if (info.suspects.size() >= 100) break;
    info.suspects.emplace_back(s.rank, s.reason);
  }
  std::set<std::string> files;
  if (round.dir_ok) {
    if (int left = writer->WaitFor(*round.writes, 120); left > 0)
      Log(LogLevel::kError, "collector: %d stack files of dump round %s are still not written after 120 s", left,
          round.dump_id.c_str());
    OutputOptions out;
    if (output_formats != 0) out.formats = output_formats;
    OutputResult result;
    std::string error;
    if (!WriteMergeOutputs(merged, verdict, out, round.dir, &result, &error)) {
      info.error = "merge not written: " + error;
      Log(LogLevel::kError, "collector: dump round %s: %s", round.dump_id.c_str(), info.error.c_str());
    }
    for (const std::string& w : result.warnings)
      Log(LogLevel::kWarn, "collector: dump round %s: %s", round.dump_id.c_str(), w.c_str());
    info.files = result.written;
    files.insert(result.written.begin(), result.written.end());
  }
  return MergedRound{std::move(info), std::move(files)};
}

}  // namespace xtimer::collector

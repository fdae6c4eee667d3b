// The merge hand-off: a closed dump round's stacks become the viewer's outputs (folded stacks,
// flame graphs, call graphs, speedscope, verdict.json; viewer/merge_output.h) in the round's
// folder, and the RoundInfo the page and the tests read. The same library code as
// xtimer_stacktrace_viewer.
//
// Runs in the caller's thread (the core's Tick) with no lock of the core held; the core runs one
// at a time. It waits for the round's stack files first (StackFileWriter::WaitFor, at most 120 s),
// so a reader that sees verdict.json finds every stack file beside it.
#pragma once

#include <set>
#include <string>

#include "collector/collector_core.h"
#include "collector/dump_round.h"
#include "collector/stack_file_writer.h"

namespace xtimer::collector {

struct MergedRound {
  RoundInfo info;               // finished: ranks reported and missing, summary, suspects, files, error
  std::set<std::string> files;  // the merge outputs written (what RoundFile may serve)
};

// `info`: the round's info so far (name, trigger...). `output_formats`: viewer OutputFormat bits,
// 0 = all. Errors (a folder not writable) are logged and kept in info.error; never throws.
MergedRound MergeRound(const DumpRound& round, DumpRound::Closed closed, RoundInfo info, unsigned output_formats,
                       StackFileWriter* writer);

}  // namespace xtimer::collector

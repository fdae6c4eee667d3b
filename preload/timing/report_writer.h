// Builds and writes a rank's summary (<rank>-<world>.summary.json) and trace
// (<rank>-<world>.trace.json) files; formats in docs/formats.md. Poller thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preload/timing/trace_buffer.h"

namespace xtimer {

class LaunchPath;

// At most `max_ops` op classes (the busiest).
std::string SummaryJson(LaunchPath& t, bool final, size_t max_ops = SIZE_MAX);
std::string TraceJson(LaunchPath& t, const std::vector<TraceEntry>& entries);
// "<timeline>/<rank:05d>-<world:05d>.<suffix>"
std::string RankFilePath(LaunchPath& t, const char* suffix);
// Writes both (trace only when enabled); logs one line per failure.
void WriteReportFiles(LaunchPath& t, const TraceBuffer& trace, bool final);

}  // namespace xtimer

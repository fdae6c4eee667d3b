// The merged stacks as a speedscope file (https://www.speedscope.app/file-format-schema.json):
// one "sampled" profile whose samples are the distinct stacks, weighted by their rank count.
#pragma once

#include <string_view>

#include "common/byte_sink.h"
#include "viewer/tree_view.h"

namespace xtimer {

// Streamed: no JSON document is built in memory. The bytes are those nlohmann-json's compact
// dump of the same document gives (tests/viewer/merge_test.cc holds it to that).
void WriteSpeedscope(const TreeView& view, std::string_view name, ByteSink& out);

}  // namespace xtimer

// The merged stacks as a speedscope file (https://www.speedscope.app/file-format-schema.json):
// one "sampled" profile whose samples are the distinct stacks, weighted by their rank count.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/byte_sink.h"
#include "viewer/tree_view.h"

namespace xtimer {

// Streamed: no JSON document is built in memory. The bytes are those nlohmann-json's compact
// dump of the same document gives (tests/viewer/render_test.cc holds it to that). label_hash:
// how the distinct labels are found (nullptr: std::hash; tests pass a poor one so that
// different labels collide).
void WriteSpeedscope(const TreeView& view, std::string_view name, ByteSink& out,
                     uint64_t (*label_hash)(std::string_view) = nullptr);

}  // namespace xtimer

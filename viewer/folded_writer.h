// Folded stacks, one line per distinct stack: `frame;frame;frame N`, root first, N the number of
// ranks with a thread whose stack is exactly that. flamegraph.pl, inferno and speedscope read it
// unchanged: labels hold no ';' and no line break, the count is the last blank-separated field.
#pragma once

#include "common/byte_sink.h"
#include "viewer/tree_view.h"

namespace xtimer {

void WriteFolded(const TreeView& view, ByteSink& out);

}  // namespace xtimer

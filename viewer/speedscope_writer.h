// The merged stacks as a speedscope file (https://www.speedscope.app/file-format-schema.json):
// one "sampled" profile whose samples are the distinct stacks, weighted by their rank count.
#pragma once

#include <string>
#include <string_view>

#include "viewer/tree_view.h"

namespace xtimer {

std::string WriteSpeedscope(const TreeView& view, std::string_view name);

}  // namespace xtimer

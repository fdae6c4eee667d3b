// The picture of a replay (slowdown_replay.h) a person would rather look at than slowdown.json:
// one self-contained SVG (no script, no font or file from elsewhere) with two panels over the
// job's time. Above, step time: every rank's as a grey band (lowest to highest), the job's as a
// black line, each rank that a slowdown named as a coloured line. Below, each rank's score (its
// rate against its peers'; the threshold dashed): the others' band, the named ranks' lines. Each
// slowdown is shaded from its onset to its end, its onset marked with a line and labelled
// ("rank 3 gpu_compute"); the slowdowns are listed under the panels with their cost. Its size
// does not grow with the number of ranks (only named ranks get lines of their own).
#pragma once

#include <string>

#include "slowdown/slowdown_replay.h"

namespace xtimer {

std::string SlowdownSvg(const SlowdownReplay& replay, double threshold, const std::string& title);

}  // namespace xtimer

// The text of a merged frame, as the seed tool writes it: `func@source@stuck_ranks|leak_ranks`,
// where stuck_ranks are the ranks whose stacks pass through the frame and leak_ranks the ranks of
// the job that do not (missing ranks included), both folded ("0-3/5/7-8").
//
// Labels go into folded files, SVG and DOT, so they are cleaned once here: valid UTF-8, no control
// characters (C1 included: U+009B is a terminal's CSI), no ';' (the folded separator), no leading/trailing or repeated
// blanks.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/stacks/rank_set.h"
#include "viewer/frame_table.h"

namespace xtimer {

// Valid UTF-8 (bad bytes become '?'), control characters (C0, DEL, C1) become blanks, runs of blanks one blank,
// no blank at either end, ';' becomes ':'. Never empty ("?" instead).
std::string CleanFrameText(std::string_view text);

// Rank lists in labels stop after this many ranges (see RankSet::Fold); verdict.json has them all.
inline constexpr size_t kLabelMaxRanges = 32;

// "func@source" (cleaned), the part of the label that does not depend on ranks.
std::string FramePart(const FrameInfo& frame);
// "func@source@stuck|leak".
std::string FrameLabel(const FrameInfo& frame, const RankSet& ranks, int32_t world_size);

// A file name or other input string made safe for one line on a terminal or in a message:
// bad UTF-8 and controls (C0, DEL, C1) become '?'.
std::string PrintableName(std::string_view text, size_t max_len = 200);

}  // namespace xtimer

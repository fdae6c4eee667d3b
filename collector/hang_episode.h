// A hang episode (collector/README.md, "Dump rounds"): from the first report of a new hang while
// none is on, until no rank reports a hang any more. One episode makes one dump round, however
// many ranks time out together; the next hang after it ends starts a new one.
//
// Not thread-safe: the core owns one and calls it under its mutex. Header only.
#pragma once

#include "collector/rank_table.h"

namespace xtimer::collector {

class HangEpisode {
 public:
  // A rank reports a hang it did not report before. true: that starts an episode (start a round).
  bool OnNewHang() {
    if (active_) return false;
    active_ = true;
    return true;
  }
  // true: the episode ends now (no rank heard from in the last stale_after_s reports a hang;
  // ranks silent longer do not count: their agent is gone).
  bool EndIfNoneHung(const RankTable& ranks, double now, double stale_after_s) {
    if (!active_ || ranks.AnyHung(now, stale_after_s)) return false;
    active_ = false;
    return true;
  }
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

}  // namespace xtimer::collector

#include "common/env.h"
#include "slowdown/slowdown_judge.h"

namespace xtimer::slowdown {

JudgeOptions JudgeOptions::FromEnv() {
  JudgeOptions o;
  o.window_s = env::Double("XTIMER_SLOW_WINDOW", 1, 600);
  o.interval_s = env::Double("XTIMER_SLOW_INTERVAL", 0.2, 600);
  o.threshold = env::Double("XTIMER_SLOW_THRESHOLD", 0.3, 0.99);
  o.baseline_s = env::Double("XTIMER_SLOW_BASELINE", 10, 86400);
  o.sample_s = env::Double("XTIMER_SLOW_SAMPLE", 0, 600);
  return o;
}

}  // namespace xtimer::slowdown

#include "common/stacks/stack_file.h"

namespace xtimer {

const StackThread* StackFile::MainThread() const {
  for (const StackThread& t : threads)
    if (t.main) return &t;
  for (const StackThread& t : threads)
    if (t.tid == pid) return &t;
  return threads.empty() ? nullptr : &threads.front();
}

}  // namespace xtimer

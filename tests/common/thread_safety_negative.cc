// Compiled by thread_safety_check.py only (never built): it must compile as written, and each
// -DXT_BREAK_RULE=N must make Clang's thread-safety analysis refuse it. Shows the check can fail.
#include "common/mutex.h"

namespace xtimer {

class Queue {
 public:
  int Size() XT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return SizeLocked();
  }
  void Push() XT_EXCLUDES(mu_, order_mu_) {
    MutexLock order(order_mu_);
    MutexLock lock(mu_);
    ++size_;
    cv_.NotifyAll();
  }
  void WaitNonEmpty() XT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&]() XT_REQUIRES(mu_) { return size_ > 0; });
  }

#if XT_BREAK_RULE == 1
  int Peek() { return size_; }  // a guarded field read without its lock
#elif XT_BREAK_RULE == 2
  int Peek() { return SizeLocked(); }  // a REQUIRES function called without the lock
#elif XT_BREAK_RULE == 3
  void Peek() {  // ACQUIRED_BEFORE taken in the wrong order
    MutexLock lock(mu_);
    MutexLock order(order_mu_);
  }
#elif XT_BREAK_RULE == 4
  void Peek() {  // an EXCLUDES function called with the lock held
    MutexLock lock(mu_);
    Size();
  }
#endif

 private:
  int SizeLocked() XT_REQUIRES(mu_) { return size_; }

  Mutex order_mu_ XT_ACQUIRED_BEFORE(mu_);
  Mutex mu_;
  CondVar cv_;
  int size_ XT_GUARDED_BY(mu_) = 0;
};

}  // namespace xtimer

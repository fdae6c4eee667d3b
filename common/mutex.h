// A mutex, a scoped lock and a condition variable that Clang's thread-safety analysis
// understands (common/thread_annotations.h): thin wrappers over std::mutex and
// std::condition_variable, header-only, no other dependency (safe inside the preloaded library).
//
//   Mutex mu_;
//   CondVar cv_;
//   bool ready_ XT_GUARDED_BY(mu_) = false;
//   ...
//   MutexLock lock(mu_);
//   cv_.Wait(mu_, [&]() XT_REQUIRES(mu_) { return ready_; });
//
// A predicate is a lambda annotated XT_REQUIRES(the mutex): the wait calls it with the mutex held,
// and the annotation lets the analysis check its body.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace xtimer {

class XT_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() XT_ACQUIRE() { mu_.lock(); }
  void Unlock() XT_RELEASE() { mu_.unlock(); }
  bool TryLock() XT_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds it (a callback the analysis cannot follow); no check.
  void AssertHeld() const XT_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex from construction to the end of the scope, like std::lock_guard; Unlock() and
// Lock() let it go around a slow call and take it back, like std::unique_lock.
class XT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) XT_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() XT_RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() XT_RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() XT_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// std::condition_variable over a Mutex the caller holds (XT_REQUIRES): a wait releases it while
// blocked and holds it again when it returns, as std::condition_variable does.
class CondVar {
 public:
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  void Wait(Mutex& mu) XT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  template <typename Pred>
  void Wait(Mutex& mu, Pred pred) XT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock, std::move(pred));
    lock.release();
  }
  // False when the time passed (with a predicate: the predicate's value at the end).
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& d) XT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(lock, d) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& d, Pred pred) XT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool ok = cv_.wait_for(lock, d, std::move(pred));
    lock.release();
    return ok;
  }
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Duration>& t) XT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, t) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Duration>& t, Pred pred) XT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool ok = cv_.wait_until(lock, t, std::move(pred));
    lock.release();
    return ok;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace xtimer

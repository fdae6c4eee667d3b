// Lock rules the compiler checks: Clang's thread-safety attributes
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), as LevelDB and Abseil write them.
// Under Clang with -Wthread-safety (the test `thread_safety_check`) a field read without its
// lock, or a function called without the lock it requires, is an error; under GCC the macros are
// empty. Prefixed XT_ because Abseil (which gRPC's headers include) still defines the bare
// legacy names (GUARDED_BY, ...). Use them with the annotated Mutex of common/mutex.h:
// libstdc++'s std::mutex carries no capability attributes.
//
//   Mutex mu_;
//   int queued_ XT_GUARDED_BY(mu_);         // read or written only with mu_ held
//   void DrainLocked() XT_REQUIRES(mu_);    // callers hold mu_
//   void Stop() XT_EXCLUDES(mu_);           // takes mu_ itself: callers must not hold it
//   Mutex a_ XT_ACQUIRED_BEFORE(b_);        // whoever holds both took a_ first
#pragma once

#if defined(__clang__)
#define XT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define XT_THREAD_ANNOTATION(x)
#endif

#define XT_CAPABILITY(x) XT_THREAD_ANNOTATION(capability(x))
#define XT_SCOPED_CAPABILITY XT_THREAD_ANNOTATION(scoped_lockable)
#define XT_GUARDED_BY(x) XT_THREAD_ANNOTATION(guarded_by(x))
#define XT_PT_GUARDED_BY(x) XT_THREAD_ANNOTATION(pt_guarded_by(x))
#define XT_ACQUIRED_BEFORE(...) XT_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define XT_ACQUIRED_AFTER(...) XT_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define XT_REQUIRES(...) XT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define XT_ACQUIRE(...) XT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define XT_RELEASE(...) XT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define XT_TRY_ACQUIRE(...) XT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define XT_EXCLUDES(...) XT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define XT_ASSERT_CAPABILITY(x) XT_THREAD_ANNOTATION(assert_capability(x))
#define XT_RETURN_CAPABILITY(x) XT_THREAD_ANNOTATION(lock_returned(x))
// For the rare function the analysis cannot follow; say why beside it.
#define XT_NO_THREAD_SAFETY_ANALYSIS XT_THREAD_ANNOTATION(no_thread_safety_analysis)

#ifndef GECD_COMMON_MUTEX_H_
#define GECD_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "absl/base/thread_annotations.h"

// The project's lock: std::mutex with Abseil's thread-safety annotations, so that clang's
// -Wthread-safety checks every guarded member. Not absl::Mutex: Debian's Abseil is not built
// for ThreadSanitizer, which then cannot see its locks and reports the data they guard as
// races; std::mutex is pthread's, which TSan intercepts.
namespace gecd {

// An exclusive lock. Await() waits, with the lock released, until a condition on the data it
// guards holds; the condition is re-checked whenever another thread unlocks, or starts to await
// (which releases the lock too), so the threads that change that data need not signal anything.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION();

  // The lock held: until `cond()` (or `*flag`) holds.
  void Await(const std::function<bool()>& cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this);
  // The same for at most `timeout`; returns whether the condition holds.
  bool AwaitWithTimeout(const std::function<bool()>& cond, std::chrono::nanoseconds timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this);
  bool AwaitWithTimeout(const bool* flag, std::chrono::nanoseconds timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return AwaitWithTimeout([flag] { return *flag; }, timeout);
  }

 private:
  friend class CondVar;

  std::mutex mu_;
  std::condition_variable changed_;  // an Unlock() while a thread awaits
  int awaiting_ = 0;                 // guarded by mu_
};

// Holds a Mutex for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds a Mutex for its scope, or until Release().
class ABSL_SCOPED_LOCKABLE ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~ReleasableMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A condition variable over a Mutex. Waits may wake spuriously: callers loop on their predicate.
class CondVar {
 public:
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // True when `timeout` passed (absl::CondVar's convention).
  bool WaitWithTimeout(Mutex* mu, std::chrono::nanoseconds timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace gecd

#endif  // GECD_COMMON_MUTEX_H_

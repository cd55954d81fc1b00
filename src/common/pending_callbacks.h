#ifndef GECD_COMMON_PENDING_CALLBACKS_H_
#define GECD_COMMON_PENDING_CALLBACKS_H_

#include <condition_variable>
#include <memory>
#include <mutex>

namespace gecd {

// Counts callbacks an object has handed to other threads (e.g. an engine link's completion
// callbacks, which capture `this`), so that its destructor can wait, in WaitForNone(), until
// none is left and none can run on a destroyed object. Each Start() returns a token that the
// callback owns: the callback has ended when its last copy is destroyed — after it ran, or
// when it is dropped unrun.
//
// Thread-safe. The object must outlive every token; WaitForNone() blocks for as long as a
// token lives, so the code that runs callbacks must run or drop each one.
class PendingCallbacks {
 public:
  using Token = std::shared_ptr<void>;

  PendingCallbacks() = default;
  PendingCallbacks(const PendingCallbacks&) = delete;
  PendingCallbacks& operator=(const PendingCallbacks&) = delete;

  Token Start();
  // Until every token handed out has been destroyed.
  void WaitForNone();
  int pending() const;

 private:
  void End();

  // std::mutex and a signal under the lock, not gecd::Mutex (which signals after unlocking):
  // the waiter returns, and the owner is destroyed, only once End() no longer touches us.
  mutable std::mutex mu_;
  std::condition_variable none_;
  int pending_ = 0;  // guarded by mu_
};

}  // namespace gecd

#endif  // GECD_COMMON_PENDING_CALLBACKS_H_

#include "common/pending_callbacks.h"

namespace gecd {

PendingCallbacks::Token PendingCallbacks::Start() {
  {
    std::lock_guard lock(mu_);
    ++pending_;
  }
  // A shared_ptr that owns nothing and ends the callback when its last copy goes: callbacks
  // are copied into std::function, so the token must be copyable.
  return Token(static_cast<void*>(nullptr), [this](void*) { End(); });
}

void PendingCallbacks::End() {
  std::lock_guard lock(mu_);
  if (--pending_ == 0) none_.notify_all();
}

void PendingCallbacks::WaitForNone() {
  std::unique_lock lock(mu_);
  none_.wait(lock, [this] { return pending_ == 0; });
}

int PendingCallbacks::pending() const {
  std::lock_guard lock(mu_);
  return pending_;
}

}  // namespace gecd

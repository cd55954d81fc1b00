#include "worker/waiting_room.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gecd::worker {

WaitingRoom::WaitingRoom(size_t capacity, std::chrono::milliseconds retry_every)
    : capacity_(capacity), retry_every_(retry_every) {
  thread_ = std::thread([this] { Loop(); });
}

WaitingRoom::~WaitingRoom() {
  Close(absl::UnavailableError("server is shutting down"));
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

void WaitingRoom::Push(Waiting waiting) {
  MutexLock lock(&mu_);
  if (!closed_.ok()) {
    rejected_.emplace_back(std::move(waiting), closed_);
  } else if (waiting_.size() >= capacity_) {
    rejected_.emplace_back(std::move(waiting),
                           absl::ResourceExhaustedError(absl::StrCat(
                               "overloaded: the batch waiting room is full (", capacity_,
                               " sentences, server.max_in_flight); retry later")));
  } else {
    waiting_.push_back(std::move(waiting));
  }
  poked_ = true;
  cv_.Signal();
}

bool WaitingRoom::Cancel(uint64_t id, absl::Status status) {
  Waiting cancelled;
  {
    MutexLock lock(&mu_);
    auto it = waiting_.begin();
    while (it != waiting_.end() && it->id != id) ++it;
    if (it == waiting_.end()) {
      // Being started: if it finds no room it must not go back to wait.
      if (has_starting_ && starting_ == id) cancel_while_starting_ = std::move(status);
      return false;
    }
    cancelled = std::move(*it);
    waiting_.erase(it);
  }
  cancelled.fail(std::move(status));
  return true;
}

void WaitingRoom::Poke() {
  MutexLock lock(&mu_);
  poked_ = true;
  cv_.Signal();
}

void WaitingRoom::Close(absl::Status status) {
  MutexLock lock(&mu_);
  if (!closed_.ok()) return;
  closed_ = status;
  for (Waiting& w : waiting_) rejected_.emplace_back(std::move(w), status);
  waiting_.clear();
  cv_.Signal();
}

size_t WaitingRoom::waiting() const {
  MutexLock lock(&mu_);
  return waiting_.size();
}

void WaitingRoom::Loop() {
  mu_.Lock();
  while (true) {
    while (!stopping_ && !poked_ && rejected_.empty()) {
      if (cv_.WaitWithTimeout(&mu_, retry_every_)) break;  // retry: room may have appeared
    }
    poked_ = false;
    // Answers outside the lock: a `fail` may call back into the queue (Cancel of another).
    while (!rejected_.empty()) {
      auto [waiting, status] = std::move(rejected_.front());
      rejected_.pop_front();
      mu_.Unlock();
      waiting.fail(std::move(status));
      mu_.Lock();
    }
    if (stopping_ && waiting_.empty()) break;
    while (!waiting_.empty() && closed_.ok()) {
      Waiting next = std::move(waiting_.front());
      waiting_.pop_front();
      starting_ = next.id;
      has_starting_ = true;
      mu_.Unlock();
      const bool started = next.try_start();
      mu_.Lock();
      has_starting_ = false;
      absl::Status cancelled = std::exchange(cancel_while_starting_, absl::OkStatus());
      if (started) continue;
      if (!cancelled.ok()) {
        rejected_.emplace_back(std::move(next), std::move(cancelled));
        continue;
      }
      waiting_.push_front(std::move(next));  // no room: wait for the next poke
      break;
    }
    if (stopping_ && waiting_.empty() && rejected_.empty()) break;
  }
  mu_.Unlock();
}

}  // namespace gecd::worker

#include "loadgen/load_recorder.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace gecd::loadgen {
namespace {

constexpr int kResourceExhausted = 8;  // grpc::StatusCode::RESOURCE_EXHAUSTED

}  // namespace

uint64_t RunResult::error_count() const {
  uint64_t n = 0;
  for (const auto& [code, count] : errors) n += count;
  return n;
}

double RunResult::refused_rate() const {
  const uint64_t completed = ok + error_count();
  return completed == 0 ? 0 : static_cast<double>(refused) / static_cast<double>(completed);
}

std::string StatusCodeName(int code) {
  static constexpr std::array<const char*, 17> kNames = {"OK",
                                                         "CANCELLED",
                                                         "UNKNOWN",
                                                         "INVALID_ARGUMENT",
                                                         "DEADLINE_EXCEEDED",
                                                         "NOT_FOUND",
                                                         "ALREADY_EXISTS",
                                                         "PERMISSION_DENIED",
                                                         "RESOURCE_EXHAUSTED",
                                                         "FAILED_PRECONDITION",
                                                         "ABORTED",
                                                         "OUT_OF_RANGE",
                                                         "UNIMPLEMENTED",
                                                         "INTERNAL",
                                                         "UNAVAILABLE",
                                                         "DATA_LOSS",
                                                         "UNAUTHENTICATED"};
  if (code == kUnanswered) return "UNANSWERED";
  if (code >= 0 && code < static_cast<int>(kNames.size())) return kNames[code];
  return absl::StrCat("CODE_", code);
}

size_t LengthBucketOf(size_t text_bytes) {
  size_t bucket = 0;
  while (bucket + 1 < kLengthBuckets && text_bytes >= kLengthBucketFloors[bucket + 1]) ++bucket;
  return bucket;
}

std::string LengthBucketName(size_t bucket) {
  if (bucket + 1 >= kLengthBuckets) return absl::StrCat(kLengthBucketFloors[bucket], "+ B");
  return absl::StrCat(kLengthBucketFloors[bucket], "-", kLengthBucketFloors[bucket + 1] - 1, " B");
}

LoadRecorder::LoadRecorder(Clock::time_point window_start, Clock::time_point window_end,
                           std::chrono::microseconds objective, Counting counting)
    : window_start_(window_start),
      window_end_(window_end),
      objective_us_(objective.count()),
      counting_(counting) {
  result_.duration_s = std::chrono::duration<double>(window_end - window_start).count();
}

SecondStats& LoadRecorder::SecondOf(Clock::time_point t) {
  const auto second = std::chrono::duration_cast<std::chrono::seconds>(t - window_start_).count();
  const size_t index = static_cast<size_t>(std::max<int64_t>(second, 0));
  if (index >= result_.timeline.size()) result_.timeline.resize(index + 1);
  return result_.timeline[index];
}

void LoadRecorder::RecordSent(Clock::time_point intended) {
  if (!InWindow(intended)) return;
  MutexLock lock(&mu_);
  ++result_.sent;
  ++SecondOf(intended).sent;
}

void LoadRecorder::RecordDone(Clock::time_point intended, Clock::time_point done, int code,
                              size_t text_bytes) {
  if (!InWindow(counting_ == Counting::kBySendTime ? intended : done)) return;
  MutexLock lock(&mu_);
  last_done_ = std::max(last_done_, done);
  SecondStats& second = SecondOf(done);
  const int64_t micros =
      std::chrono::duration_cast<std::chrono::microseconds>(done - intended).count();
  if (code == 0) {
    ++result_.ok;
    ++second.ok;
    result_.ok_latency.Record(micros);
    result_.ok_latency_by_length[LengthBucketOf(text_bytes)].Record(micros);
    if (micros <= objective_us_) ++result_.within_objective;
    second.ok_latency.Record(micros);
  } else {
    ++result_.errors[StatusCodeName(code)];
    ++second.errors;
    if (code == kResourceExhausted) {
      ++result_.refused;
      result_.refused_latency.Record(micros);
    }
  }
}

RunResult LoadRecorder::Finish() {
  MutexLock lock(&mu_);
  result_.elapsed_s =
      counting_ == Counting::kByCompletionTime
          ? result_.duration_s
          : std::max(result_.duration_s,
                     std::chrono::duration<double>(last_done_ - window_start_).count());
  return std::move(result_);
}

}  // namespace gecd::loadgen

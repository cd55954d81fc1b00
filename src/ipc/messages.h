#ifndef GECD_IPC_MESSAGES_H_
#define GECD_IPC_MESSAGES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

// The records workers and the engine exchange, packed several to a ring message. Each record
// is a fixed little header followed by int32 tokens; fields are copied byte-wise, so a record
// may start at any offset. Worker -> engine: Submit, Cancel. Engine -> worker: Done.
// Every record carries the engine epoch it belongs to, so that a restarted engine ignores
// what its predecessor left in the rings, and a worker ignores answers to requests it already
// failed.
namespace gecd::ipc {

struct SubmitRecord {
  uint64_t id = 0;  // the worker's request id
  uint64_t epoch = 0;
  int64_t arrival_us = 0;  // CLOCK_MONOTONIC (shared by all processes of the host)
  // engine::GenerationParams' due and deadline times (CLOCK_MONOTONIC; deadline 0: none).
  int64_t due_us = 0;
  int64_t deadline_us = 0;
  int32_t max_new_tokens = 0;
  // The copy bias (engine::GenerationParams): its value and the prompt's tokens [copy_begin,
  // copy_end) that hold the user's text, found by the worker that built the prompt.
  float copy_bias = 0;
  int32_t copy_begin = 0;
  int32_t copy_end = 0;
  std::vector<int32_t> tokens;  // the prompt
};

struct CancelRecord {
  uint64_t id = 0;
  uint64_t epoch = 0;
};

// The longest DoneRecord::message that travels; a longer one is cut (at a UTF-8 boundary).
inline constexpr size_t kMaxDoneMessageBytes = 512;

struct DoneRecord {
  uint64_t id = 0;
  uint64_t epoch = 0;
  int32_t status_code = 0;      // absl::StatusCode
  int64_t queue_us = 0;         // arrival → first engine step that ran it
  int64_t engine_us = 0;        // first step → last token
  int64_t first_token_us = 0;   // arrival → the step that produced its first token; 0: none
  std::vector<int32_t> tokens;  // generated, stop token excluded
  std::string message;          // why, when status_code is not OK (the engine's Status message)
};

using Record = std::variant<SubmitRecord, CancelRecord, DoneRecord>;

// Encoded size of a record.
size_t RecordBytes(const Record& record);

// Appends records to a caller-owned buffer (usually a reserved ring slot).
class MessageWriter {
 public:
  MessageWriter() = default;
  explicit MessageWriter(std::span<uint8_t> buffer) : buffer_(buffer) {}

  // False, writing nothing, when the record does not fit in what is left.
  bool Add(const Record& record);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::span<uint8_t> buffer_;
  size_t size_ = 0;
};

// Decodes a message record by record. A truncated or unknown record, or a length beyond the
// message or a field's bound, is an error, after which
// the reader stays at the end; it never reads outside the message (written by another process).
class MessageReader {
 public:
  explicit MessageReader(std::span<const uint8_t> message) : message_(message) {}

  // Decodes the next record into `record`; false at the end of the message.
  absl::StatusOr<bool> Next(Record* record);

 private:
  std::span<const uint8_t> message_;
  size_t offset_ = 0;
};

}  // namespace gecd::ipc

#endif  // GECD_IPC_MESSAGES_H_

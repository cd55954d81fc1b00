// libFuzzer target: ipc::MessageReader on arbitrary bytes, as a ring slot written by another
// (possibly broken) process holds them. It must decode record by record or fail with a Status,
// never crash, hang or read outside the message; once it fails it stays at the end. What it
// decodes must be exactly the bytes it consumed: re-encoding the records gives back the
// message's first bytes, so no field is read from beyond the message or skipped.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ipc/messages.h"

using gecd::ipc::DoneRecord;
using gecd::ipc::kMaxDoneMessageBytes;
using gecd::ipc::MessageReader;
using gecd::ipc::MessageWriter;
using gecd::ipc::Record;
using gecd::ipc::RecordBytes;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Ring slots put a message at any offset: start it at an odd address, ending where the
  // fuzzer's own allocation ends, so that ASan still flags a read past its last byte.
  std::vector<uint8_t> slot(size + 1);
  if (size > 0) std::memcpy(slot.data() + 1, data, size);
  const std::span<const uint8_t> message(slot.data() + 1, size);

  MessageReader reader(message);
  std::vector<Record> records;
  size_t consumed = 0;
  Record record;
  for (;;) {
    absl::StatusOr<bool> more = reader.Next(&record);
    if (!more.ok()) {
      // After an error the reader is at the end for good.
      absl::StatusOr<bool> again = reader.Next(&record);
      if (!again.ok() || *again) std::abort();
      break;
    }
    if (!*more) {
      if (consumed != size) std::abort();  // the end is only reported at the message's end
      break;
    }
    if (const auto* done = std::get_if<DoneRecord>(&record)) {
      if (done->message.size() > kMaxDoneMessageBytes) std::abort();
      if (done->status_code < 0 || done->status_code > 16) std::abort();
    }
    consumed += RecordBytes(record);
    if (consumed > size) std::abort();
    records.push_back(record);
  }

  // Round trip: the decoded records, encoded again, are the bytes they came from.
  std::vector<uint8_t> encoded(consumed);
  MessageWriter writer(encoded);
  for (const Record& r : records) {
    if (!writer.Add(r)) std::abort();
  }
  if (writer.size() != consumed) std::abort();
  if (consumed > 0 && std::memcmp(encoded.data(), data, consumed) != 0) std::abort();
  return 0;
}

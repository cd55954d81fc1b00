#include "ipc/messages.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gecd::ipc {
namespace {

// Wire layout, all fields native-endian (both sides share one host):
//   uint32 type, uint32 num_tokens, uint64 id, uint64 epoch, then per type:
//   Submit: int64 arrival_us, int64 due_us, int64 deadline_us, int32 max_new_tokens,
//           float copy_bias, int32 copy_begin, int32 copy_end, tokens
//   Cancel: nothing (num_tokens is 0)
//   Done:   int32 status_code, int64 queue_us, int64 engine_us, int64 first_token_us,
//           uint32 message_bytes, tokens, message
enum RecordType : uint32_t { kSubmit = 1, kCancel = 2, kDone = 3 };

constexpr size_t kCommonBytes = 4 + 4 + 8 + 8;
constexpr size_t kSubmitBytes = kCommonBytes + 8 + 8 + 8 + 4 + 4 + 4 + 4;
constexpr size_t kCancelBytes = kCommonBytes;
constexpr size_t kDoneBytes = kCommonBytes + 4 + 8 + 8 + 8 + 4;
constexpr int32_t kMaxStatusCode = 16;  // absl::StatusCode::kUnauthenticated

// How much of a DONE record's message is sent: at most kMaxDoneMessageBytes, not splitting a
// UTF-8 sequence.
size_t SentMessageBytes(const std::string& message) {
  if (message.size() <= kMaxDoneMessageBytes) return message.size();
  size_t n = kMaxDoneMessageBytes;
  while (n > 0 && (static_cast<uint8_t>(message[n]) & 0xC0) == 0x80) --n;
  return n;
}

class Encoder {
 public:
  explicit Encoder(uint8_t* out) : out_(out) {}
  template <typename T>
  void Put(T value) {
    std::memcpy(out_, &value, sizeof(T));
    out_ += sizeof(T);
  }
  void PutTokens(const std::vector<int32_t>& tokens) {
    if (tokens.empty()) return;  // data() may be null, which memcpy must not get even for 0 bytes
    std::memcpy(out_, tokens.data(), tokens.size() * sizeof(int32_t));
    out_ += tokens.size() * sizeof(int32_t);
  }
  void PutBytes(const char* data, size_t n) {
    std::memcpy(out_, data, n);
    out_ += n;
  }

 private:
  uint8_t* out_;
};

class Decoder {
 public:
  explicit Decoder(const uint8_t* in) : in_(in) {}
  template <typename T>
  T Get() {
    T value;
    std::memcpy(&value, in_, sizeof(T));
    in_ += sizeof(T);
    return value;
  }
  std::vector<int32_t> GetTokens(uint32_t n) {
    std::vector<int32_t> tokens(n);
    if (n == 0) return tokens;  // as in PutTokens: no memcpy to a null data()
    std::memcpy(tokens.data(), in_, n * sizeof(int32_t));
    in_ += n * sizeof(int32_t);
    return tokens;
  }
  std::string GetBytes(size_t n) {
    std::string bytes(reinterpret_cast<const char*>(in_), n);
    in_ += n;
    return bytes;
  }

 private:
  const uint8_t* in_;
};

}  // namespace

size_t RecordBytes(const Record& record) {
  struct Size {
    size_t operator()(const SubmitRecord& r) const { return kSubmitBytes + 4 * r.tokens.size(); }
    size_t operator()(const CancelRecord&) const { return kCancelBytes; }
    size_t operator()(const DoneRecord& r) const {
      return kDoneBytes + 4 * r.tokens.size() + SentMessageBytes(r.message);
    }
  };
  return std::visit(Size{}, record);
}

bool MessageWriter::Add(const Record& record) {
  const size_t bytes = RecordBytes(record);
  if (bytes > buffer_.size() - size_) return false;
  Encoder out(buffer_.data() + size_);
  if (const auto* r = std::get_if<SubmitRecord>(&record)) {
    out.Put<uint32_t>(kSubmit);
    out.Put<uint32_t>(r->tokens.size());
    out.Put(r->id);
    out.Put(r->epoch);
    out.Put(r->arrival_us);
    out.Put(r->due_us);
    out.Put(r->deadline_us);
    out.Put(r->max_new_tokens);
    out.Put(r->copy_bias);
    out.Put(r->copy_begin);
    out.Put(r->copy_end);
    out.PutTokens(r->tokens);
  } else if (const auto* c = std::get_if<CancelRecord>(&record)) {
    out.Put<uint32_t>(kCancel);
    out.Put<uint32_t>(0);
    out.Put(c->id);
    out.Put(c->epoch);
  } else {
    const auto& d = std::get<DoneRecord>(record);
    out.Put<uint32_t>(kDone);
    out.Put<uint32_t>(d.tokens.size());
    out.Put(d.id);
    out.Put(d.epoch);
    out.Put(d.status_code);
    out.Put(d.queue_us);
    out.Put(d.engine_us);
    out.Put(d.first_token_us);
    const size_t message_bytes = SentMessageBytes(d.message);
    out.Put<uint32_t>(message_bytes);
    out.PutTokens(d.tokens);
    out.PutBytes(d.message.data(), message_bytes);
  }
  size_ += bytes;
  return true;
}

absl::StatusOr<bool> MessageReader::Next(Record* record) {
  const size_t left = message_.size() - offset_;
  if (left == 0) return false;
  auto fail = [&](const std::string& what) {
    const size_t at = offset_;
    offset_ = message_.size();
    return absl::DataLossError(absl::StrCat("corrupt ring message at byte ", at, ": ", what));
  };
  if (left < kCommonBytes) return fail("truncated record header");
  Decoder in(message_.data() + offset_);
  const uint32_t type = in.Get<uint32_t>();
  const uint32_t num_tokens = in.Get<uint32_t>();
  const uint64_t id = in.Get<uint64_t>();
  const uint64_t epoch = in.Get<uint64_t>();
  size_t fixed;
  switch (type) {
    case kSubmit:
      fixed = kSubmitBytes;
      break;
    case kCancel:
      fixed = kCancelBytes;
      break;
    case kDone:
      fixed = kDoneBytes;
      break;
    default:
      return fail(absl::StrCat("unknown record type ", type));
  }
  if (left < fixed || num_tokens > (left - fixed) / sizeof(int32_t)) {
    return fail("record longer than the message");
  }
  if (type == kCancel && num_tokens != 0) return fail("cancel record with tokens");
  size_t extra = 0;  // bytes after the tokens: a DONE record's message
  if (type == kSubmit) {
    SubmitRecord r;
    r.id = id;
    r.epoch = epoch;
    r.arrival_us = in.Get<int64_t>();
    r.due_us = in.Get<int64_t>();
    r.deadline_us = in.Get<int64_t>();
    r.max_new_tokens = in.Get<int32_t>();
    r.copy_bias = in.Get<float>();
    r.copy_begin = in.Get<int32_t>();
    r.copy_end = in.Get<int32_t>();
    r.tokens = in.GetTokens(num_tokens);
    *record = std::move(r);
  } else if (type == kCancel) {
    *record = CancelRecord{.id = id, .epoch = epoch};
  } else {
    DoneRecord r;
    r.id = id;
    r.epoch = epoch;
    r.status_code = in.Get<int32_t>();
    if (r.status_code < 0 || r.status_code > kMaxStatusCode) {
      return fail(absl::StrCat("status code ", r.status_code));
    }
    r.queue_us = in.Get<int64_t>();
    r.engine_us = in.Get<int64_t>();
    r.first_token_us = in.Get<int64_t>();
    const uint32_t message_bytes = in.Get<uint32_t>();
    if (message_bytes > kMaxDoneMessageBytes) {
      return fail(absl::StrCat("done message of ", message_bytes, " bytes (at most ",
                               kMaxDoneMessageBytes, ")"));
    }
    if (message_bytes > left - fixed - num_tokens * sizeof(int32_t)) {
      return fail("record longer than the message");
    }
    r.tokens = in.GetTokens(num_tokens);
    r.message = in.GetBytes(message_bytes);
    extra = message_bytes;
    *record = std::move(r);
  }
  offset_ += fixed + num_tokens * sizeof(int32_t) + extra;
  return true;
}

}  // namespace gecd::ipc

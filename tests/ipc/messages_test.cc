#include "ipc/messages.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::ipc {
namespace {

std::vector<Record> ReadAll(std::span<const uint8_t> message, absl::Status* error) {
  MessageReader reader(message);
  std::vector<Record> records;
  Record record;
  for (;;) {
    absl::StatusOr<bool> more = reader.Next(&record);
    if (!more.ok()) {
      *error = more.status();
      return records;
    }
    if (!*more) return records;
    records.push_back(record);
  }
}

SubmitRecord Submit() {
  SubmitRecord r;
  r.id = 0x1122334455667788;
  r.epoch = 3;
  r.arrival_us = 123456789;
  r.due_us = 124456789;
  r.deadline_us = 128456789;
  r.max_new_tokens = 64;
  r.copy_bias = 2.5f;
  r.copy_begin = 1;
  r.copy_end = 3;
  r.tokens = {1, 2, 3, 1999};
  return r;
}

DoneRecord Done() {
  DoneRecord r;
  r.id = 42;
  r.epoch = 3;
  r.status_code = static_cast<int32_t>(absl::StatusCode::kCancelled);
  r.queue_us = 17;
  r.engine_us = 9000;
  r.first_token_us = 250;
  r.tokens = {5, 6};
  r.message = "prompt of 9000 tokens exceeds the KV cache";
  return r;
}

TEST(MessagesTest, RecordsRoundTripPackedInOneMessage) {
  std::vector<uint8_t> buffer(1024);
  MessageWriter writer(buffer);
  ASSERT_TRUE(writer.Add(Submit()));
  ASSERT_TRUE(writer.Add(CancelRecord{.id = 7, .epoch = 3}));
  ASSERT_TRUE(writer.Add(Done()));
  EXPECT_EQ(writer.size(),
            RecordBytes(Submit()) + RecordBytes(CancelRecord{}) + RecordBytes(Done()));

  absl::Status error;
  std::vector<Record> records = ReadAll({buffer.data(), writer.size()}, &error);
  ASSERT_TRUE(error.ok()) << error;
  ASSERT_EQ(records.size(), 3u);
  const auto& s = std::get<SubmitRecord>(records[0]);
  EXPECT_EQ(s.id, Submit().id);
  EXPECT_EQ(s.epoch, 3u);
  EXPECT_EQ(s.arrival_us, 123456789);
  EXPECT_EQ(s.due_us, 124456789);
  EXPECT_EQ(s.deadline_us, 128456789);
  EXPECT_EQ(s.max_new_tokens, 64);
  EXPECT_EQ(s.copy_bias, 2.5f);
  EXPECT_EQ(s.copy_begin, 1);
  EXPECT_EQ(s.copy_end, 3);
  EXPECT_EQ(s.tokens, Submit().tokens);
  const auto& c = std::get<CancelRecord>(records[1]);
  EXPECT_EQ(c.id, 7u);
  EXPECT_EQ(c.epoch, 3u);
  const auto& d = std::get<DoneRecord>(records[2]);
  EXPECT_EQ(d.id, 42u);
  EXPECT_EQ(d.status_code, static_cast<int32_t>(absl::StatusCode::kCancelled));
  EXPECT_EQ(d.queue_us, 17);
  EXPECT_EQ(d.engine_us, 9000);
  EXPECT_EQ(d.first_token_us, 250);
  EXPECT_EQ(d.tokens, Done().tokens);
  EXPECT_EQ(d.message, Done().message);
}

// Found by tests/fuzz/message_reader_fuzz.cc under UBSan: an empty token list was memcpy'd
// through its null data().
TEST(MessagesTest, RecordsWithoutTokensRoundTrip) {
  SubmitRecord submit = Submit();
  submit.tokens.clear();
  DoneRecord done = Done();
  done.tokens.clear();
  std::vector<uint8_t> buffer(1024);
  MessageWriter writer(buffer);
  ASSERT_TRUE(writer.Add(submit));
  ASSERT_TRUE(writer.Add(done));

  absl::Status error;
  std::vector<Record> records = ReadAll({buffer.data(), writer.size()}, &error);
  ASSERT_TRUE(error.ok()) << error;
  ASSERT_EQ(records.size(), 2u);
  EXPECT_TRUE(std::get<SubmitRecord>(records[0]).tokens.empty());
  EXPECT_TRUE(std::get<DoneRecord>(records[1]).tokens.empty());
  EXPECT_EQ(std::get<DoneRecord>(records[1]).message, done.message);
}

TEST(MessagesTest, ALongDoneMessageIsCutAtACharacterBoundary) {
  DoneRecord done = Done();
  done.message = std::string(kMaxDoneMessageBytes - 1, 'a') + "\xc3\xa9 and more";  // é straddles
  std::vector<uint8_t> buffer(2048);
  MessageWriter writer(buffer);
  ASSERT_TRUE(writer.Add(done));
  EXPECT_EQ(writer.size(), RecordBytes(done));
  absl::Status error;
  std::vector<Record> records = ReadAll({buffer.data(), writer.size()}, &error);
  ASSERT_TRUE(error.ok()) << error;
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(std::get<DoneRecord>(records[0]).message, std::string(kMaxDoneMessageBytes - 1, 'a'));
  EXPECT_EQ(std::get<DoneRecord>(records[0]).tokens, done.tokens);
}

TEST(MessagesTest, WriterRefusesWhatDoesNotFitAndKeepsWhatDid) {
  std::vector<uint8_t> buffer(RecordBytes(Submit()) + 10);
  MessageWriter writer(buffer);
  EXPECT_TRUE(writer.Add(Submit()));
  EXPECT_FALSE(writer.Add(CancelRecord{.id = 1, .epoch = 1}));
  EXPECT_EQ(writer.size(), RecordBytes(Submit()));
}

TEST(MessagesTest, EveryTruncationIsAnErrorNotAnOverread) {
  std::vector<uint8_t> buffer(1024);
  MessageWriter writer(buffer);
  ASSERT_TRUE(writer.Add(Submit()));
  ASSERT_TRUE(writer.Add(Done()));
  const size_t first = RecordBytes(Submit());
  for (size_t size = 1; size < writer.size(); ++size) {
    // A copy of exactly `size` bytes, so a read past it would be a heap overflow.
    std::vector<uint8_t> cut(buffer.begin(), buffer.begin() + size);
    absl::Status error;
    std::vector<Record> records = ReadAll(cut, &error);
    if (size == first) {
      EXPECT_TRUE(error.ok());
      EXPECT_EQ(records.size(), 1u);
    } else {
      EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss) << size;
      EXPECT_EQ(records.size(), size < first ? 0u : 1u);
    }
  }
}

TEST(MessagesTest, CorruptFieldsAreErrors) {
  std::vector<uint8_t> buffer(1024);
  MessageWriter writer(buffer);
  ASSERT_TRUE(writer.Add(Done()));
  std::vector<uint8_t> message(buffer.begin(), buffer.begin() + writer.size());
  absl::Status error;

  std::vector<uint8_t> bad_type = message;
  bad_type[0] = 99;
  EXPECT_TRUE(ReadAll(bad_type, &error).empty());
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);

  std::vector<uint8_t> huge_count = message;
  huge_count[4] = huge_count[5] = huge_count[6] = huge_count[7] = 0xff;
  error = absl::OkStatus();
  EXPECT_TRUE(ReadAll(huge_count, &error).empty());
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);

  std::vector<uint8_t> bad_code = message;
  bad_code[24] = 77;  // status_code follows type, count, id and epoch
  error = absl::OkStatus();
  EXPECT_TRUE(ReadAll(bad_code, &error).empty());
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);

  // message_bytes (after status_code, queue_us, engine_us and first_token_us): beyond its bound,
  // or beyond the message, even where the bytes are there.
  constexpr size_t kMessageBytesAt = 24 + 4 + 8 + 8 + 8;
  for (const uint32_t n : {static_cast<uint32_t>(kMaxDoneMessageBytes + 1), 0xffffffffu,
                           static_cast<uint32_t>(Done().message.size() + 1)}) {
    std::vector<uint8_t> bad_length = message;
    bad_length.resize(message.size() + kMaxDoneMessageBytes + 8, 'x');
    std::memcpy(bad_length.data() + kMessageBytesAt, &n, sizeof(n));
    if (n == Done().message.size() + 1) bad_length.resize(message.size());
    error = absl::OkStatus();
    EXPECT_TRUE(ReadAll(bad_length, &error).empty()) << n;
    EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss) << n;
  }
}

}  // namespace
}  // namespace gecd::ipc

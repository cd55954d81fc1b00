#include "route/grpc_wire.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "gecd/v1/grammar.pb.h"
#include "gtest/gtest.h"

namespace gecd::route {
namespace {

using std::chrono::nanoseconds;

TEST(GrpcWireTest, TimeoutsParseInEveryUnit) {
  EXPECT_EQ(ParseGrpcTimeout("2H"), std::chrono::hours(2));
  EXPECT_EQ(ParseGrpcTimeout("3M"), std::chrono::minutes(3));
  EXPECT_EQ(ParseGrpcTimeout("4S"), std::chrono::seconds(4));
  EXPECT_EQ(ParseGrpcTimeout("250m"), std::chrono::milliseconds(250));
  EXPECT_EQ(ParseGrpcTimeout("99999999u"), std::chrono::microseconds(99999999));
  EXPECT_EQ(ParseGrpcTimeout("7n"), nanoseconds(7));
}

TEST(GrpcWireTest, MalformedTimeoutsAreRefused) {
  for (const char* bad : {"", "m", "10", "123456789m", "1x", "-1m", "1.5S", " 1m"}) {
    EXPECT_FALSE(ParseGrpcTimeout(bad).has_value()) << bad;
  }
}

TEST(GrpcWireTest, TimeoutsAreWrittenInTheFinestUnitThatFitsRoundedUp) {
  EXPECT_EQ(FormatGrpcTimeout(nanoseconds(0)), "1n");
  EXPECT_EQ(FormatGrpcTimeout(nanoseconds(1'500'000)), "1500000n");
  EXPECT_EQ(FormatGrpcTimeout(std::chrono::milliseconds(300)), "300000u");
  EXPECT_EQ(FormatGrpcTimeout(nanoseconds(300'000'001)), "300001u");  // up, never down
  EXPECT_EQ(FormatGrpcTimeout(std::chrono::hours(30)), "108000S");
  for (const nanoseconds t : {nanoseconds(1), nanoseconds(123'456'789'012), nanoseconds(999)}) {
    const auto back = ParseGrpcTimeout(FormatGrpcTimeout(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_GE(*back, t);
  }
}

TEST(GrpcWireTest, MessagesAreCountedAcrossAnySplitOfTheBytes) {
  // Three messages: 3 bytes, empty, 300 bytes (a length over one byte of the prefix).
  std::string bytes;
  bytes += std::string("\0\0\0\0\3abc", 8);
  bytes += std::string("\0\0\0\0\0", 5);
  bytes += std::string("\1\0\0\1\x2c", 5) + std::string(300, 'z');
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{4}, size_t{7}, bytes.size()}) {
    GrpcMessageCounter counter;
    int messages = 0;
    for (size_t at = 0; at < bytes.size(); at += chunk) {
      const size_t n = std::min(chunk, bytes.size() - at);
      messages += counter.Feed(reinterpret_cast<const uint8_t*>(bytes.data() + at), n);
    }
    EXPECT_EQ(messages, 3) << "chunks of " << chunk;
  }
  GrpcMessageCounter counter;  // a message is counted when its last byte has gone by
  EXPECT_EQ(counter.Feed(reinterpret_cast<const uint8_t*>(bytes.data()), 7), 0);
  EXPECT_EQ(counter.Feed(reinterpret_cast<const uint8_t*>(bytes.data() + 7), 1), 1);
}

// `payload` as one gRPC message: the compressed flag, the big-endian length, the bytes.
std::string Framed(const std::string& payload, bool compressed = false) {
  std::string out(1, compressed ? '\1' : '\0');
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(n >> shift));
  return out + payload;
}

// CorrectStream's answers with stream_sentences: the sentence answers are told apart from the
// text's own answer whatever the fields before them and however the bytes are split, so the
// router ends a text's request once, at its own answer.
TEST(GrpcWireTest, SentenceAnswersAreToldApartFromATextsAnswer) {
  gecd::v1::CorrectResponse sentence;
  sentence.set_request_id("r1");
  sentence.mutable_status()->set_code(0);
  sentence.mutable_sentence_answer()->set_index(2);
  sentence.mutable_sentence_answer()->set_corrected(std::string(200, 'x'));  // a 2-byte length
  gecd::v1::CorrectResponse text;
  text.set_request_id("r1");
  text.set_corrected_text(std::string(300, 'y'));
  text.add_edits()->set_replacement("went");
  text.add_sentences()->set_end(300);
  gecd::v1::CorrectResponse empty;
  gecd::v1::CorrectResponse bare;  // only the sentence answer, its first field
  bare.mutable_sentence_answer();
  std::string bytes = Framed(sentence.SerializeAsString()) + Framed(text.SerializeAsString()) +
                      Framed(empty.SerializeAsString()) + Framed(bare.SerializeAsString()) +
                      Framed(sentence.SerializeAsString(), /*compressed=*/true) +
                      Framed(std::string("\x0f\x52\x02ab", 5));  // wire type 7: not protobuf
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, bytes.size()}) {
    GrpcMessageCounter counter(10);
    int messages = 0, interim = 0;
    for (size_t at = 0; at < bytes.size(); at += chunk) {
      const size_t n = std::min(chunk, bytes.size() - at);
      messages += counter.Feed(reinterpret_cast<const uint8_t*>(bytes.data() + at), n, &interim);
    }
    EXPECT_EQ(messages, 6) << "chunks of " << chunk;
    EXPECT_EQ(interim, 2) << "chunks of " << chunk;  // the plain sentence answer and the bare one
  }
  GrpcMessageCounter plain;  // no interim field: every message ends a request
  int interim = 0;
  EXPECT_EQ(plain.Feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &interim), 6);
  EXPECT_EQ(interim, 0);
}

TEST(GrpcWireTest, MessagesArePercentEncodedOutsidePrintableAscii) {
  EXPECT_EQ(PercentEncode("no endpoint: 50%"), "no endpoint: 50%25");
  EXPECT_EQ(PercentEncode("a\nb\xc3\xa9"), "a%0Ab%C3%A9");
  const Headers h = TrailersOnly(14, "gone");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].name, ":status");
  EXPECT_EQ(h[0].value, "200");
  EXPECT_EQ(h[2].value, "14");
  EXPECT_EQ(h[3].value, "gone");
  EXPECT_EQ(TrailersOnly(0, "").size(), 3u);  // no grpc-message when there is nothing to say
}

TEST(GrpcWireTest, HttpStatusesMapAsGrpcDoes) {
  EXPECT_EQ(CodeForHttpStatus(503), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CodeForHttpStatus(404), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(CodeForHttpStatus(401), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CodeForHttpStatus(200), grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace gecd::route

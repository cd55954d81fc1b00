#include "route/grpc_wire.h"

#include <algorithm>
#include <chrono>
#include <string>

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

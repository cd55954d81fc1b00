#include "route/grpc_wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gecd::route {

std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t n = 0;
  for (char ch : value.substr(0, value.size() - 1)) {
    if (ch < '0' || ch > '9') return std::nullopt;
    n = n * 10 + (ch - '0');
  }
  using std::chrono::nanoseconds;
  switch (value.back()) {
    case 'H':
      return std::chrono::hours(n);
    case 'M':
      return std::chrono::minutes(n);
    case 'S':
      return std::chrono::seconds(n);
    case 'm':
      return std::chrono::milliseconds(n);
    case 'u':
      return std::chrono::microseconds(n);
    case 'n':
      return nanoseconds(n);
    default:
      return std::nullopt;
  }
}

std::string FormatGrpcTimeout(std::chrono::nanoseconds timeout) {
  constexpr int64_t kMax = 99'999'999;
  struct Unit {
    int64_t ns;
    char symbol;
  };
  constexpr Unit kUnits[] = {{1, 'n'},
                             {1'000, 'u'},
                             {1'000'000, 'm'},
                             {1'000'000'000, 'S'},
                             {60'000'000'000, 'M'},
                             {3'600'000'000'000, 'H'}};
  const int64_t ns = std::max<int64_t>(1, timeout.count());
  for (const Unit& u : kUnits) {
    const int64_t n = (ns + u.ns - 1) / u.ns;
    if (n <= kMax) return absl::StrCat(n, std::string(1, u.symbol));
  }
  return absl::StrCat(kMax, "H");
}

int GrpcMessageCounter::Feed(const uint8_t* data, size_t size, int* interim) {
  int complete = 0;
  while (size > 0) {
    if (prefix_seen_ < 5) {
      if (prefix_seen_ == 0) compressed_ = *data != 0;
      if (prefix_seen_ >= 1) length_ = (length_ << 8) | *data;
      ++prefix_seen_;
      ++data;
      --size;
      if (prefix_seen_ < 5) continue;
      left_ = length_;
    } else {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(left_, size));
      if (interim_field_ != 0 && !compressed_) ScanPayload(data, take);
      left_ -= take;
      data += take;
      size -= take;
    }
    if (prefix_seen_ == 5 && left_ == 0) {
      ++complete;
      if (interim_seen_ && interim != nullptr) ++*interim;
      prefix_seen_ = 0;
      length_ = 0;
      scan_ = Scan::kKey;
      varint_ = skip_ = 0;
      shift_ = 0;
      interim_seen_ = false;
    }
  }
  return complete;
}

void GrpcMessageCounter::ScanPayload(const uint8_t* data, size_t size) {
  while (size > 0 && scan_ != Scan::kDone) {
    if (scan_ == Scan::kSkip) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(skip_, size));
      skip_ -= take;
      data += take;
      size -= take;
      if (skip_ == 0) scan_ = Scan::kKey;
      continue;
    }
    const uint8_t byte = *data++;
    --size;
    if (scan_ == Scan::kVarint) {
      if ((byte & 0x80) == 0) scan_ = Scan::kKey;
      continue;
    }
    // A key or a length: a varint of at most 10 bytes.
    if (shift_ > 63) {
      scan_ = Scan::kDone;
      continue;
    }
    varint_ |= static_cast<uint64_t>(byte & 0x7f) << shift_;
    shift_ += 7;
    if ((byte & 0x80) != 0) continue;
    const uint64_t value = varint_;
    varint_ = 0;
    shift_ = 0;
    if (scan_ == Scan::kLength) {
      skip_ = value;
      scan_ = value > 0 ? Scan::kSkip : Scan::kKey;
      continue;
    }
    switch (value & 7) {  // the wire type
      case 0:
        scan_ = Scan::kVarint;
        break;
      case 1:
        skip_ = 8;
        scan_ = Scan::kSkip;
        break;
      case 5:
        skip_ = 4;
        scan_ = Scan::kSkip;
        break;
      case 2:
        if ((value >> 3) == interim_field_) {
          interim_seen_ = true;
          scan_ = Scan::kDone;
        } else {
          scan_ = Scan::kLength;
        }
        break;
      default:  // groups or not protobuf: read no further
        scan_ = Scan::kDone;
    }
  }
}

std::string PercentEncode(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (unsigned char ch : message) {
    if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
      out.push_back(static_cast<char>(ch));
    } else {
      constexpr char kHex[] = "0123456789ABCDEF";
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}

Headers TrailersOnly(int code, std::string_view message) {
  Headers headers = {{":status", "200"},
                     {"content-type", "application/grpc"},
                     {"grpc-status", std::to_string(code)}};
  if (!message.empty()) headers.push_back({"grpc-message", PercentEncode(message)});
  return headers;
}

grpc::StatusCode CodeForHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return grpc::StatusCode::INTERNAL;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return grpc::StatusCode::UNKNOWN;
  }
}

}  // namespace gecd::route

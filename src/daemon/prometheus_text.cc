#include "daemon/prometheus_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gecd::daemon::prometheus {
namespace {

constexpr std::string_view kCodeNames[kNumCodes] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

}  // namespace

std::string_view CodeName(int grpc_code) { return kCodeNames[CodeIndex(grpc_code)]; }

std::string EscapeLabel(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void AppendHeader(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type) {
  absl::StrAppend(&out, "# HELP ", std::string(name), " ", std::string(help), "\n# TYPE ",
                  std::string(name), " ", std::string(type), "\n");
}

void AppendScalar(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type, const std::string& value) {
  AppendHeader(out, name, help, type);
  absl::StrAppend(&out, std::string(name), " ", value, "\n");
}

void AppendHistogram(std::string& out, std::string_view name, std::string_view help,
                     std::span<const double> bounds, std::span<const uint64_t> counts, double sum) {
  const std::string n(name);
  AppendHeader(out, name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    absl::StrAppendFormat(&out, "%s_bucket{le=\"%g\"} %d\n", n, bounds[i], cumulative);
  }
  cumulative += counts[bounds.size()];
  absl::StrAppendFormat(&out, "%s_bucket{le=\"+Inf\"} %d\n", n, cumulative);
  absl::StrAppendFormat(&out, "%s_sum %.6f\n", n, sum);
  absl::StrAppendFormat(&out, "%s_count %d\n", n, cumulative);
}

}  // namespace gecd::daemon::prometheus

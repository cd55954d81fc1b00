#include "common/logging.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace gecd {
namespace {

// Appends `text` as the inside of a JSON string.
void AppendJsonEscaped(std::string_view text, spdlog::memory_buf_t& dest) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    switch (c) {
      case '"':
        dest.append(std::string_view("\\\""));
        break;
      case '\\':
        dest.append(std::string_view("\\\\"));
        break;
      case '\n':
        dest.append(std::string_view("\\n"));
        break;
      case '\r':
        dest.append(std::string_view("\\r"));
        break;
      case '\t':
        dest.append(std::string_view("\\t"));
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
          dest.append(esc, esc + sizeof(esc));
        } else {
          dest.push_back(c);
        }
    }
  }
}

// %j: the message payload escaped for a JSON string (spdlog's %v writes it raw).
class JsonPayloadFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonPayloadFlag>();
  }
};

}  // namespace

absl::Status SetUpLogging(std::string_view role, std::string_view level, std::string_view format) {
  const spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  // from_str maps anything unknown to "off"; only an explicit "off" may mean that.
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat("unknown log level '", std::string(level), "'"));
  }
  std::unique_ptr<spdlog::pattern_formatter> formatter;
  if (format == "text") {
    formatter = std::make_unique<spdlog::pattern_formatter>(
        absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [%l] [", std::string(role), " %P] %v"));
  } else if (format == "json") {
    spdlog::memory_buf_t escaped_role;
    AppendJsonEscaped(role, escaped_role);
    formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonPayloadFlag>('j').set_pattern(absl::StrCat(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","role":")",
        std::string(escaped_role.data(), escaped_role.size()), R"(","pid":%P,"msg":"%j"})"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log format '", std::string(format), "' (text | json)"));
  }
  // The stderr sink flushes every line, so a crash loses nothing already logged.
  auto logger =
      std::make_shared<spdlog::logger>("gecd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_formatter(std::move(formatter));
  logger->set_level(lvl);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace gecd

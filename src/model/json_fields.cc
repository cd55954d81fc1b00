#include "model/json_fields.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace gecd::model {

using nlohmann::json;

std::string JsonSnippet(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

absl::StatusOr<json> ParseJson(std::string_view text, std::string_view path) {
  // allow_exceptions=false turns a syntax error into a `discarded` value instead of a throw.
  json value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": not valid JSON"));
  }
  return value;
}

absl::Status WriteJsonFile(const std::string& path, const json& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << value.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JsonToInt(const json& value, int64_t min, int64_t max,
                                  std::string_view path, std::string_view label) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ", std::string(label),
                                                     ": ", u, " is above the maximum ", max));
    }
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ", std::string(label),
                                                   ": expected an integer, got ",
                                                   JsonSnippet(value)));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ", std::string(label),
                                                   ": ", v, " is outside [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<JsonObject> JsonObject::Of(const json& value, std::string_view path,
                                          std::string_view key) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ",
                                                   key.empty() ? "top level" : std::string(key),
                                                   ": expected a JSON object"));
  }
  return JsonObject(&value, std::string(path), std::string(key));
}

std::string JsonObject::Label(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : absl::StrCat(prefix_, ".", std::string(key));
}

absl::Status JsonObject::Error(std::string_view key, std::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", Label(key), ": ", std::string(what)));
}

const json* JsonObject::Find(std::string_view key) const {
  auto it = json_->find(key);
  if (it == json_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonObject::Has(std::string_view key) const { return Find(key) != nullptr; }

absl::StatusOr<std::optional<int64_t>> JsonObject::OptionalInt(std::string_view key, int64_t min,
                                                               int64_t max) const {
  const json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  return JsonToInt(*v, min, max, path_, Label(key));
}

absl::StatusOr<int64_t> JsonObject::Int(std::string_view key, int64_t min, int64_t max) const {
  const json* v = Find(key);
  if (v == nullptr) return Error(key, "missing");
  return JsonToInt(*v, min, max, path_, Label(key));
}

absl::StatusOr<std::optional<double>> JsonObject::OptionalNumber(std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return Error(key, absl::StrCat("expected a number, got ", JsonSnippet(*v)));
  return v->get<double>();
}

absl::StatusOr<std::optional<bool>> JsonObject::OptionalBool(std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean())
    return Error(key, absl::StrCat("expected true or false, got ", JsonSnippet(*v)));
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> JsonObject::OptionalString(std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return Error(key, absl::StrCat("expected a string, got ", JsonSnippet(*v)));
  return v->get<std::string>();
}

absl::StatusOr<std::string> JsonObject::String(std::string_view key) const {
  auto s = OptionalString(key);
  if (!s.ok()) return s.status();
  if (!s->has_value()) return Error(key, "missing");
  return **s;
}

absl::StatusOr<JsonObject> JsonObject::Object(std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return Error(key, "missing");
  return Of(*v, path_, Label(key));
}

}  // namespace gecd::model

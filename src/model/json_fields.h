#ifndef GECD_MODEL_JSON_FIELDS_H_
#define GECD_MODEL_JSON_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

// Typed, exception-free access to the JSON files of a model directory (config.json, the
// safetensors header, the shard index). Every error names the file and the dotted key, e.g.
// "config.json: quantization_config.weights.num_bits: expected 8, got 4".
namespace gecd::model {

// Parses `text` without throwing; `path` labels the error.
absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view path);

// A view of one JSON object inside a file. Does not own the JSON, which must outlive it.
class JsonObject {
 public:
  // Fails unless `value` is an object.
  static absl::StatusOr<JsonObject> Of(const nlohmann::json& value, std::string_view path,
                                       std::string_view key = "");

  const nlohmann::json& value() const { return *json_; }
  // Present and not null.
  bool Has(std::string_view key) const;
  const nlohmann::json* Find(std::string_view key) const;  // nullptr when absent or null

  absl::StatusOr<int64_t> Int(std::string_view key, int64_t min, int64_t max) const;
  absl::StatusOr<std::optional<int64_t>> OptionalInt(std::string_view key, int64_t min,
                                                     int64_t max) const;
  absl::StatusOr<std::optional<double>> OptionalNumber(std::string_view key) const;
  absl::StatusOr<std::optional<bool>> OptionalBool(std::string_view key) const;
  absl::StatusOr<std::optional<std::string>> OptionalString(std::string_view key) const;
  absl::StatusOr<std::string> String(std::string_view key) const;
  absl::StatusOr<JsonObject> Object(std::string_view key) const;

  // "<key path>.<key>", the label errors use.
  std::string Label(std::string_view key) const;
  // InvalidArgument "<file>: <label>: <what>".
  absl::Status Error(std::string_view key, std::string_view what) const;
  const std::string& path() const { return path_; }

 private:
  JsonObject(const nlohmann::json* json, std::string path, std::string prefix)
      : json_(json), path_(std::move(path)), prefix_(std::move(prefix)) {}
  const nlohmann::json* json_;
  std::string path_;
  std::string prefix_;
};

// Writes `value` indented by two spaces, as transformers writes config.json.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value);

// A value quoted in an error message: never throws (bad UTF-8 is replaced), at most 60 chars.
std::string JsonSnippet(const nlohmann::json& value);

// Reads an integer from a JSON value already found; `label` names it in errors.
absl::StatusOr<int64_t> JsonToInt(const nlohmann::json& value, int64_t min, int64_t max,
                                  std::string_view path, std::string_view label);

}  // namespace gecd::model

#endif  // GECD_MODEL_JSON_FIELDS_H_

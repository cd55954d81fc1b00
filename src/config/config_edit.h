#ifndef GECD_CONFIG_CONFIG_EDIT_H_
#define GECD_CONFIG_CONFIG_EDIT_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

// Writing a config file back with some keys changed: how `gecd tune` turns the operator's file
// into its tuned copy, so that the copy reads like the original with only those keys changed.
namespace gecd::config {

// (key path, value) as `--set` takes them, e.g. {"engine.max_batch_size", "256"}.
using KeyValues = std::vector<std::pair<std::string, std::string>>;

// `yaml` (a config file's text) with each key of `values` set. A key the file holds as a
// scalar in a block mapping is replaced in place, keeping its line's comment; a key it lacks is
// added as the first entry of its section, or in a new section at the end. Comments, order and
// every other key stay as they were. A layout this cannot edit in place (flow mappings, a
// section left empty) is written anew from the parsed tree, without the comments. The result is
// parsed again, and each key must read back as its value.
// InvalidArgument: a key the config does not have, a value its field refuses (naming the key),
// or text that is not YAML.
absl::StatusOr<std::string> SetConfigValues(std::string_view yaml, const KeyValues& values);

// How a config file in directory `to_dir` should name the file at `path` (both absolute):
// relative to `to_dir` when the two share their top-level directory (a tree that moves
// together, like a checkout), else `path` itself.
std::string RelocatePath(const std::string& path, const std::string& to_dir);

// `yaml`, read from directory `from_dir`, as it must read from `to_dir`: each relative path of
// a key in PathKeys() rewritten by RelocatePath (both directories absolute), with
// SetConfigValues.
absl::StatusOr<std::string> MoveConfigText(std::string_view yaml, const std::string& from_dir,
                                           const std::string& to_dir);

}  // namespace gecd::config

#endif  // GECD_CONFIG_CONFIG_EDIT_H_

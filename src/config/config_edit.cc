#include "config/config_edit.h"

#include <filesystem>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "yaml-cpp/yaml.h"

namespace gecd::config {
namespace {

// The layout is one this file cannot edit in place; the caller writes the tree anew.
absl::Status CannotEditInPlace(std::string_view why) {
  return absl::UnimplementedError(std::string(why));
}

absl::StatusOr<YAML::Node> Load(const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("line ", e.mark.line + 1, ": ", e.msg));
  }
}

// The scalar at `key` ("engine.max_batch_size"), if the tree has one there.
std::optional<std::string> ScalarAt(const YAML::Node& root, const std::string& key) {
  YAML::Node node;
  node.reset(root);
  for (const absl::string_view part : absl::StrSplit(key, '.')) {
    if (!node.IsMap()) return std::nullopt;
    const YAML::Node& map = node;  // const: a lookup that must not add the key
    const YAML::Node child = map[std::string(part)];
    if (!child.IsDefined()) return std::nullopt;
    node.reset(child);
  }
  if (!node.IsScalar()) return std::nullopt;
  return node.Scalar();
}

// Numbers and booleans as they are; anything else double-quoted, so that "" or "1,2,4" read
// back as the same string.
std::string YamlScalar(const std::string& value) {
  bool number = !value.empty();
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    number = number && (absl::ascii_isdigit(c) || c == '.' || (c == '-' && i == 0));
  }
  if (number || value == "true" || value == "false") return value;
  std::string quoted = "\"";
  for (const char c : value) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

// The end (exclusive) of the scalar that starts at `pos` on its line of `text`.
absl::StatusOr<size_t> ScalarEnd(const std::string& text, size_t pos, const YAML::Node& value) {
  const size_t eol = std::min(text.find('\n', pos), text.size());
  const char quote = text[pos];
  if (quote == '"' || quote == '\'') {
    for (size_t i = pos + 1; i < eol; ++i) {
      if (quote == '"' && text[i] == '\\') {
        ++i;
      } else if (text[i] == quote) {
        if (quote == '\'' && i + 1 < eol && text[i + 1] == '\'') {
          ++i;  // '' is a quote inside single quotes
          continue;
        }
        return i + 1;
      }
    }
    return CannotEditInPlace("a quoted scalar over several lines");
  }
  size_t end = eol;
  for (size_t i = pos; i < eol; ++i) {
    if (text[i] == '#' && i > pos && (text[i - 1] == ' ' || text[i - 1] == '\t')) {
      end = i;
      break;
    }
  }
  while (end > pos && (text[end - 1] == ' ' || text[end - 1] == '\t')) --end;
  // A plain scalar continued on the next lines, or one behind a tag or anchor, reads as more
  // than this line holds.
  if (text.compare(pos, end - pos, value.Scalar()) != 0) {
    return CannotEditInPlace("a scalar this line does not hold alone");
  }
  return end;
}

// `parts[from..]` as nested block-mapping lines, the first indented by `indent`.
std::string NewLines(const std::vector<std::string>& parts, size_t from, int indent,
                     const std::string& value) {
  std::string lines;
  for (size_t i = from; i < parts.size(); ++i) {
    lines += std::string(indent + 2 * (i - from), ' ') + parts[i] + ":";
    lines += i + 1 == parts.size() ? absl::StrCat(" ", YamlScalar(value), "\n") : "\n";
  }
  return lines;
}

// Sets one key in the text, in place.
absl::StatusOr<std::string> EditInPlace(std::string text, const std::string& key,
                                        const std::string& value) {
  ASSIGN_OR_RETURN(const YAML::Node root, Load(text));
  if (!root.IsMap() && !root.IsNull()) return CannotEditInPlace("the top level is not a mapping");
  if (root.IsMap() && root.Style() == YAML::EmitterStyle::Flow) {
    return CannotEditInPlace("a flow mapping");
  }
  const std::vector<std::string> parts = absl::StrSplit(key, '.');
  // Nodes are handles into the tree: reset() re-points one, where `=` would assign into it.
  YAML::Node map;
  map.reset(root);
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    bool found = false;
    YAML::Node child;
    for (const auto& kv : map) {
      if (kv.first.IsScalar() && kv.first.Scalar() == parts[i]) {
        child.reset(kv.second);
        found = true;
      }
    }
    if (found && last) {
      if (!child.IsScalar()) return CannotEditInPlace("a value that is not a scalar");
      const size_t pos = child.Mark().pos;
      ASSIGN_OR_RETURN(const size_t end, ScalarEnd(text, pos, child));
      return text.replace(pos, end - pos, YamlScalar(value));
    }
    if (found) {
      if (!child.IsMap() || child.Style() == YAML::EmitterStyle::Flow) {
        return CannotEditInPlace("a section that is not a block mapping");
      }
      map.reset(child);
      continue;
    }
    if (i == 0) {  // a new section at the end of the file
      if (!text.empty() && text.back() != '\n') text += '\n';
      return text + NewLines(parts, 0, 0, value);
    }
    // The section exists: the key goes before its first entry, at that entry's indentation.
    const YAML::Mark first = map.begin()->first.Mark();
    const size_t line_start = first.pos - first.column;
    return text.insert(line_start, NewLines(parts, i, first.column, value));
  }
  return CannotEditInPlace("an empty key");
}

// The whole tree written anew with the keys set (what EditInPlace cannot do keeps no comments).
absl::StatusOr<std::string> Rewrite(const std::string& text, const KeyValues& values) {
  ASSIGN_OR_RETURN(YAML::Node root, Load(text));
  if (root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  try {
    for (const auto& [key, value] : values) {
      YAML::Node node;
      node.reset(root);
      for (const absl::string_view part : absl::StrSplit(key, '.')) {
        node.reset(node[std::string(part)]);
      }
      node = value;
    }
  } catch (const YAML::Exception& e) {
    // e.g. "engine: cpu", a scalar where a section must be
    return absl::InvalidArgumentError(absl::StrCat("line ", e.mark.line + 1, ": ", e.msg));
  }
  YAML::Emitter out;
  out << root;
  return absl::StrCat(out.c_str(), "\n");
}

// Each key reads back as its value.
bool ReadsBack(const std::string& text, const KeyValues& values) {
  absl::StatusOr<YAML::Node> root = Load(text);
  if (!root.ok()) return false;
  for (const auto& [key, value] : values) {
    if (ScalarAt(*root, key) != value) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> SetConfigValues(std::string_view yaml, const KeyValues& values) {
  Config scratch;
  for (const auto& [key, value] : values) RETURN_IF_ERROR(ApplyOverride(scratch, key, value));
  std::string text(yaml);
  RETURN_IF_ERROR(Load(text).status());
  bool in_place = true;
  for (const auto& [key, value] : values) {
    absl::StatusOr<std::string> edited = EditInPlace(text, key, value);
    if (absl::IsUnimplemented(edited.status())) {
      in_place = false;
      break;
    }
    RETURN_IF_ERROR(edited.status());
    text = *std::move(edited);
  }
  if (in_place && ReadsBack(text, values)) return text;
  ASSIGN_OR_RETURN(text, Rewrite(std::string(yaml), values));
  if (!ReadsBack(text, values)) {
    return absl::InternalError("the rewritten config does not read back the values it was given");
  }
  return text;
}

std::string RelocatePath(const std::string& path, const std::string& to_dir) {
  const std::filesystem::path target = std::filesystem::path(path).lexically_normal();
  const std::filesystem::path dir = std::filesystem::path(to_dir).lexically_normal();
  const auto top = [](const std::filesystem::path& p) {
    auto it = p.begin();
    return it != p.end() && ++it != p.end() ? *it : std::filesystem::path();
  };
  if (top(target) != top(dir) || top(target).empty()) return target.string();
  const std::filesystem::path relative = target.lexically_relative(dir);
  return relative.empty() ? "." : relative.string();
}

absl::StatusOr<std::string> MoveConfigText(std::string_view yaml, const std::string& from_dir,
                                           const std::string& to_dir) {
  ASSIGN_OR_RETURN(const YAML::Node root, Load(std::string(yaml)));
  KeyValues moved;
  for (const std::string& key : PathKeys()) {
    const std::optional<std::string> value = ScalarAt(root, key);
    if (!value.has_value() || value->empty()) continue;
    const std::filesystem::path path(*value);
    if (path.is_absolute()) continue;
    moved.emplace_back(key,
                       RelocatePath((std::filesystem::path(from_dir) / path).string(), to_dir));
  }
  if (moved.empty()) return std::string(yaml);
  return SetConfigValues(yaml, moved);
}

}  // namespace gecd::config

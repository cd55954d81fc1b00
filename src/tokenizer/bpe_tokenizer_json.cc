#include "tokenizer/bpe_tokenizer_json.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace gecd::model {
namespace {

using nlohmann::json;

// The regex ByteLevel{use_regex: true} splits with (GPT-2's).
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The label of an array element, e.g. "model.merges[3]".
std::string Indexed(std::string_view label, size_t i) {
  return absl::StrCat(std::string(label), "[", i, "]");
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizerJson>> BpeTokenizerJson::Parse(
    std::string_view json_text, const std::string& source) {
  ASSIGN_OR_RETURN(json doc, ParseJson(json_text, source));
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::Of(doc, source));
  auto rep = std::unique_ptr<BpeTokenizerJson>(new BpeTokenizerJson());
  // The normalizer comes first: normalized added tokens are matched in their normalized form.
  RETURN_IF_ERROR(rep->ParseNormalizer(root));
  RETURN_IF_ERROR(rep->ParsePreTokenizer(root));
  RETURN_IF_ERROR(rep->ParseModel(root));
  RETURN_IF_ERROR(rep->ParseAddedTokens(root));
  RETURN_IF_ERROR(rep->ParseDecoder(root));

  int32_t size = static_cast<int32_t>(rep->id_bytes.size());
  for (const AddedToken& token : rep->added) size = std::max(size, token.id + 1);
  rep->id_bytes.resize(size);
  rep->id_special.assign(size, 0);
  for (const AddedToken& token : rep->added) {
    rep->id_bytes[token.id] = token.content;
    rep->id_special[token.id] = token.special;
  }
  return rep;
}

absl::Status BpeTokenizerJson::ParseNormalizer(const JsonObject& root) {
  const json* value = root.Find("normalizer");
  if (value == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(JsonObject normalizer, JsonObject::Of(*value, root.path(), "normalizer"));
  ASSIGN_OR_RETURN(std::string type, normalizer.String("type"));
  std::vector<JsonObject> parts;
  if (type == "Sequence") {
    const json* list = normalizer.Find("normalizers");
    if (list == nullptr || !list->is_array()) {
      return normalizer.Error("normalizers", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      ASSIGN_OR_RETURN(
          JsonObject part,
          JsonObject::Of((*list)[i], root.path(), Indexed(normalizer.Label("normalizers"), i)));
      parts.push_back(part);
    }
  } else {
    parts.push_back(normalizer);
  }
  for (const JsonObject& part : parts) {
    ASSIGN_OR_RETURN(std::string part_type, part.String("type"));
    if (part_type != "NFC") {
      return absl::UnimplementedError(absl::StrCat(root.path(), ": ", part.Label("type"), ": \"",
                                                   part_type,
                                                   "\" is not supported (only NFC or none)"));
    }
    nfc = true;
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizerJson::ParsePreTokenizer(const JsonObject& root) {
  const json* value = root.Find("pre_tokenizer");
  if (value == nullptr) {
    return root.Error("pre_tokenizer", "missing (byte-level BPE needs a ByteLevel pre-tokenizer)");
  }
  ASSIGN_OR_RETURN(JsonObject top, JsonObject::Of(*value, root.path(), "pre_tokenizer"));
  ASSIGN_OR_RETURN(std::string type, top.String("type"));
  std::vector<JsonObject> steps;
  if (type == "Sequence") {
    const json* list = top.Find("pretokenizers");
    if (list == nullptr || !list->is_array() || list->empty()) {
      return top.Error("pretokenizers", "expected a non-empty array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      ASSIGN_OR_RETURN(JsonObject step, JsonObject::Of((*list)[i], root.path(),
                                                       Indexed(top.Label("pretokenizers"), i)));
      steps.push_back(step);
    }
  } else {
    steps.push_back(top);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSIGN_OR_RETURN(std::string step_type, steps[i].String("type"));
    const bool last = i + 1 == steps.size();
    if (step_type == "Split" && !last) {
      RETURN_IF_ERROR(ParseSplit(steps[i]));
    } else if (step_type == "ByteLevel" && last) {
      RETURN_IF_ERROR(ParseByteLevel(steps[i]));
    } else {
      // Any other step, or these in another order, would need a different pipeline; refusing
      // beats producing ids that silently differ from the reference.
      return absl::UnimplementedError(absl::StrCat(
          root.path(), ": ", steps[i].Label("type"), ": \"", step_type,
          "\" is not supported here (supported: Split steps followed by one ByteLevel)"));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizerJson::ParseSplit(const JsonObject& split) {
  ASSIGN_OR_RETURN(JsonObject pattern, split.Object("pattern"));
  std::string regex;
  if (pattern.Has("Regex")) {
    ASSIGN_OR_RETURN(regex, pattern.String("Regex"));
  } else if (pattern.Has("String")) {
    ASSIGN_OR_RETURN(std::string literal, pattern.String("String"));
    for (char c : literal) {
      if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) {
        regex.push_back('\\');
      }
      regex.push_back(c);
    }
  } else {
    return split.Error("pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  }
  ASSIGN_OR_RETURN(std::optional<bool> invert, split.OptionalBool("invert"));
  if (invert.value_or(false)) {
    return absl::UnimplementedError(
        absl::StrCat(split.path(), ": ", split.Label("invert"), ": true is not supported"));
  }
  ASSIGN_OR_RETURN(std::string behavior, split.String("behavior"));
  if (behavior != "Isolated" && behavior != "Removed") {
    return absl::UnimplementedError(absl::StrCat(split.path(), ": ", split.Label("behavior"),
                                                 ": \"", behavior,
                                                 "\" is not supported (only Isolated or Removed)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> compiled,
                   Regex::Compile(regex, absl::StrCat(split.path(), ": ", split.Label("pattern"))));
  splits.push_back(SplitStep{std::move(compiled), behavior == "Isolated"});
  return absl::OkStatus();
}

absl::Status BpeTokenizerJson::ParseByteLevel(const JsonObject& byte_level) {
  ASSIGN_OR_RETURN(std::optional<bool> add_prefix_space,
                   byte_level.OptionalBool("add_prefix_space"));
  if (add_prefix_space.value_or(false)) {
    return absl::UnimplementedError(absl::StrCat(
        byte_level.path(), ": ", byte_level.Label("add_prefix_space"), ": true is not supported"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> use_regex, byte_level.OptionalBool("use_regex"));
  if (use_regex.value_or(true)) {
    ASSIGN_OR_RETURN(std::unique_ptr<Regex> compiled,
                     Regex::Compile(kGpt2Pattern, "GPT-2 pattern"));
    splits.push_back(SplitStep{std::move(compiled), true});
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizerJson::ParseModel(const JsonObject& root) {
  ASSIGN_OR_RETURN(JsonObject model, root.Object("model"));
  ASSIGN_OR_RETURN(std::optional<std::string> type, model.OptionalString("type"));
  if (type.has_value() && *type != "BPE") {
    return absl::UnimplementedError(absl::StrCat(root.path(), ": ", model.Label("type"), ": \"",
                                                 *type, "\" is not supported (only BPE)"));
  }
  ASSIGN_OR_RETURN(std::optional<double> dropout, model.OptionalNumber("dropout"));
  if (dropout.value_or(0.0) != 0.0) {
    return absl::UnimplementedError(
        absl::StrCat(root.path(), ": ", model.Label("dropout"), ": BPE dropout is not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    ASSIGN_OR_RETURN(std::optional<std::string> affix, model.OptionalString(key));
    if (!affix.value_or("").empty()) {
      return absl::UnimplementedError(
          absl::StrCat(root.path(), ": ", model.Label(key), ": only \"\" is supported"));
    }
  }
  ASSIGN_OR_RETURN(std::optional<bool> byte_fallback, model.OptionalBool("byte_fallback"));
  if (byte_fallback.value_or(false)) {
    return absl::UnimplementedError(
        absl::StrCat(root.path(), ": ", model.Label("byte_fallback"), ": true is not supported"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore, model.OptionalBool("ignore_merges"));
  ignore_merges = ignore.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> fuse, model.OptionalBool("fuse_unk"));
  fuse_unk = fuse.value_or(false);

  const json* vocab_json = model.Find("vocab");
  if (vocab_json == nullptr || !vocab_json->is_object()) {
    return model.Error("vocab", "expected an object of token -> id");
  }
  // Ids must be dense, 0 .. size-1: tables are indexed by id, and a stray huge id must be an
  // error rather than a giant allocation.
  const int64_t vocab_count = static_cast<int64_t>(vocab_json->size());
  vocab.reserve(vocab_json->size());
  for (const auto& [token, id_json] : vocab_json->items()) {
    ASSIGN_OR_RETURN(int64_t id, JsonToInt(id_json, 0, vocab_count - 1, root.path(),
                                           absl::StrCat(model.Label("vocab"), ".", token)));
    vocab.emplace(token, static_cast<int32_t>(id));
  }
  id_bytes.assign(vocab.size(), "");
  std::vector<uint8_t> seen(id_bytes.size(), 0);
  for (const auto& [token, id] : vocab) {
    if (seen[id]) {
      return model.Error("vocab", absl::StrCat("id ", id, " is given to more than one token"));
    }
    seen[id] = 1;
    id_bytes[id] = ByteLevelBytes(token);
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    AppendUtf8(ByteToCodepoint()[b], &spelling);
    auto it = vocab.find(spelling);
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }

  ASSIGN_OR_RETURN(std::optional<std::string> unk, model.OptionalString("unk_token"));
  if (unk.has_value()) {
    auto it = vocab.find(*unk);
    if (it == vocab.end()) {
      return model.Error("unk_token", absl::StrCat("\"", *unk, "\" is not in model.vocab"));
    }
    unk_id = it->second;
  }

  const json* merges_json = model.Find("merges");
  if (merges_json == nullptr || !merges_json->is_array()) {
    return model.Error("merges", "expected an array");
  }
  merges.reserve(merges_json->size());
  const std::string merges_label = model.Label("merges");
  for (size_t rank = 0; rank < merges_json->size(); ++rank) {
    const json& entry = (*merges_json)[rank];
    std::string left, right;
    if (entry.is_string()) {
      const std::string& line = entry.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(root.path(), ": ", Indexed(merges_label, rank),
                         ": expected \"left right\", got ", JsonSnippet(entry)));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          root.path(), ": ", Indexed(merges_label, rank),
          ": expected \"left right\" or [\"left\", \"right\"], got ", JsonSnippet(entry)));
    }
    int32_t ids[3];
    const std::string parts[3] = {left, right, left + right};
    for (int k = 0; k < 3; ++k) {
      auto it = vocab.find(parts[k]);
      if (it == vocab.end()) {
        return absl::InvalidArgumentError(absl::StrCat(root.path(), ": ",
                                                       Indexed(merges_label, rank), ": token \"",
                                                       parts[k], "\" is not in model.vocab"));
      }
      ids[k] = it->second;
    }
    // A repeated pair keeps its last rank, as the reference's map insertion does.
    merges.insert_or_assign(PairKey(ids[0], ids[1]), Merge{static_cast<uint32_t>(rank), ids[2]});
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizerJson::ParseAddedTokens(const JsonObject& root) {
  const json* list = root.Find("added_tokens");
  if (list == nullptr) return absl::OkStatus();
  if (!list->is_array()) return root.Error("added_tokens", "expected an array");
  added.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    ASSIGN_OR_RETURN(JsonObject entry,
                     JsonObject::Of((*list)[i], root.path(), Indexed("added_tokens", i)));
    AddedToken token;
    // Added ids extend the vocabulary; bounding them keeps the id tables dense.
    ASSIGN_OR_RETURN(int64_t id,
                     entry.Int("id", 0, static_cast<int64_t>(id_bytes.size() + list->size()) - 1));
    token.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(token.content, entry.String("content"));
    if (token.content.empty()) return entry.Error("content", "must not be empty");
    if (absl::Status s = ValidateUtf8(token.content); !s.ok()) {
      return entry.Error("content", std::string(s.message()));
    }
    const std::pair<const char*, bool*> flags[] = {{"special", &token.special},
                                                   {"lstrip", &token.lstrip},
                                                   {"rstrip", &token.rstrip},
                                                   {"single_word", &token.single_word},
                                                   {"normalized", &token.normalized}};
    for (const auto& [key, field] : flags) {
      ASSIGN_OR_RETURN(std::optional<bool> flag, entry.OptionalBool(key));
      if (flag.has_value()) *field = *flag;
    }
    added.push_back(std::move(token));
  }
  for (const AddedToken& token : added) {
    added_by_content.insert_or_assign(token.content, token.id);
    if (!token.normalized) {
      raw_matcher.Add(token.content, &token);
    } else if (nfc) {
      ASSIGN_OR_RETURN(std::string pattern, Nfc(token.content));
      normalized_matcher.Add(std::move(pattern), &token);
    } else {
      normalized_matcher.Add(token.content, &token);
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizerJson::ParseDecoder(const JsonObject& root) {
  const json* value = root.Find("decoder");
  if (value == nullptr) return root.Error("decoder", "missing (expected ByteLevel)");
  ASSIGN_OR_RETURN(JsonObject decoder, JsonObject::Of(*value, root.path(), "decoder"));
  ASSIGN_OR_RETURN(std::string type, decoder.String("type"));
  if (type != "ByteLevel") {
    return absl::UnimplementedError(absl::StrCat(root.path(), ": ", decoder.Label("type"), ": \"",
                                                 type, "\" is not supported (only ByteLevel)"));
  }
  return absl::OkStatus();
}

}  // namespace gecd::model

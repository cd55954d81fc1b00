// libFuzzer target for the tokenizers. Each input is
//   1. encoded by a small built-in byte-level BPE (GPT-2 style: no normalizer, no stripping
//      tokens), where any valid UTF-8 must round-trip exactly;
//   2. encoded by a second one with the full feature set (NFC, a Qwen-style Split regex, added
//      tokens with lstrip/rstrip/single_word/normalized), which only must not crash;
//   3. parsed as a tokenizer.json, and, when that loads, used to encode a few strings.
//   4. cut, after its first byte (which picks the cuts and which pieces are template text),
//      into three pieces for EncodePieces: the plain tokenizer must round-trip them and give no
//      added token when no piece allows one; the featured one only must not crash.
// Errors are fine everywhere; crashes, sanitizer reports and round-trip failures are not.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "testing/byte_level_vocab.h"
#include "tokenizer/bpe_tokenizer.h"

namespace {

using gecd::model::BpeTokenizer;
using gecd::model::TextPiece;
using gecd::testing::ByteLevelVocab;
using gecd::testing::ByteSpelling;
using nlohmann::json;

json BaseConfig() {
  json vocab = ByteLevelVocab();
  json merges = json::array();
  int next = 256;
  // Merges over common letters (and the byte-level space), so the merge loop has work to do.
  const std::string letters = "etaoinshrdlu";
  const std::string space = ByteSpelling(' ');
  for (char a : letters) {
    for (const std::string& left : {std::string(1, a), space}) {
      for (char b : letters) {
        const std::string right(1, b);
        if (vocab.contains(left + right)) continue;
        vocab[left + right] = next++;
        merges.push_back(left + " " + right);
      }
    }
  }
  return json{{"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::unique_ptr<BpeTokenizer> Build(const json& config) {
  auto tokenizer = BpeTokenizer::LoadFromJson(config.dump(), "fuzz/tokenizer.json");
  if (!tokenizer.ok()) {  // the built-in configs are valid
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    std::abort();
  }
  return std::move(*tokenizer);
}

const BpeTokenizer& Plain() {
  static const std::unique_ptr<BpeTokenizer> tokenizer = [] {
    json config = BaseConfig();
    const int id = static_cast<int>(config["model"]["vocab"].size());
    config["added_tokens"] = json::array(
        {{{"id", id}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}});
    return Build(config);
  }();
  return *tokenizer;
}

const BpeTokenizer& Featured() {
  static const std::unique_ptr<BpeTokenizer> tokenizer = [] {
    json config = BaseConfig();
    config["normalizer"] = {{"type", "NFC"}};
    config["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern",
                {{"Regex",
                  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
               {"behavior", "Isolated"}},
              {{"type", "ByteLevel"}, {"use_regex", false}}})}};
    const int base = static_cast<int>(config["model"]["vocab"].size());
    const auto token = [base](int k, const char* content, bool lstrip, bool rstrip,
                              bool single_word, bool normalized) {
      return json{{"id", base + k},          {"content", content}, {"special", k % 2 == 0},
                  {"lstrip", lstrip},        {"rstrip", rstrip},   {"single_word", single_word},
                  {"normalized", normalized}};
    };
    config["added_tokens"] = json::array(
        {token(0, "<s>", false, false, false, false), token(1, "<s>>", true, true, false, false),
         token(2, "mask", true, true, true, true), token(3, " x", false, true, false, false),
         token(4, "e\xCC\x81", false, false, false, true)});
    return Build(config);
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const auto ids = Plain().Encode(text);
  if (ids.ok()) {
    if (Plain().Decode(*ids, /*skip_special=*/false) != text) std::abort();
    for (int32_t id : *ids) {
      if (id < 0 || id >= Plain().vocab_size()) std::abort();
    }
  }
  (void)Featured().Encode(text);

  if (size > 0) {
    const uint8_t control = data[0];
    const std::string_view rest = text.substr(1);
    const size_t a = rest.size() * (control & 0x7) / 7;
    const size_t b = a + (rest.size() - a) * ((control >> 3) & 0x7) / 7;
    const bool templated = (control & 0xC0) != 0;
    const TextPiece pieces[] = {{rest.substr(0, a), (control & 0x40) != 0},
                                {rest.substr(a, b - a), false},
                                {rest.substr(b), (control & 0x80) != 0}};
    const auto piece_ids = Plain().EncodePieces(pieces);
    if (piece_ids.ok()) {
      if (Plain().Decode(*piece_ids, /*skip_special=*/false) != rest) std::abort();
      for (int32_t id : *piece_ids) {
        if (!templated && Plain().IsSpecial(id)) std::abort();
      }
    }
    (void)Featured().EncodePieces(pieces);
  }

  auto loaded = BpeTokenizer::LoadFromJson(text, "fuzz-input");
  if (loaded.ok()) {
    for (std::string_view probe : {"Hello world", " \t\n x", "<s>caf\xC3\xA9 123"}) {
      (void)(*loaded)->Encode(probe);
    }
    (void)(*loaded)->Decode(std::vector<int32_t>{0, 1, -1, 1 << 30}, false);
  }
  return 0;
}

#include "testing/byte_level_tokenizer.h"

#include <fstream>

#include "nlohmann/json.hpp"
#include "testing/byte_level_vocab.h"

namespace gecd::testing {

void WriteByteLevelTokenizer(const std::string& dir) {
  using nlohmann::json;
  const json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", ByteLevelVocab()}, {"merges", json::array()}}}};
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
}

}  // namespace gecd::testing

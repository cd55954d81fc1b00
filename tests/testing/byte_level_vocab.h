#ifndef GECD_TESTS_TESTING_BYTE_LEVEL_VOCAB_H_
#define GECD_TESTS_TESTING_BYTE_LEVEL_VOCAB_H_

#include <string>

#include "nlohmann/json.hpp"

// Building blocks for hand-made byte-level (GPT-2 style) tokenizer.json files. Used by the
// tokenizer tests and by the tokenizer fuzz target, which compiles byte_level_vocab.cc itself
// because it must not link gtest.
namespace gecd::testing {

// GPT-2's byte alphabet spelling of byte `b` (0-255), the way tokenizer.json vocabularies
// write it: printable Latin-1 bytes stand for themselves, the rest map to U+0100 upward.
std::string ByteSpelling(int b);

// A vocabulary object mapping the spelling of every byte to its value (id == byte), to which a
// test adds its merged tokens from id 256.
nlohmann::json ByteLevelVocab();

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_BYTE_LEVEL_VOCAB_H_

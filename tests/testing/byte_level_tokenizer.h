#ifndef GECD_TESTS_TESTING_BYTE_LEVEL_TOKENIZER_H_
#define GECD_TESTS_TESTING_BYTE_LEVEL_TOKENIZER_H_

#include <string>

// A model directory whose tokenizer is byte-level BPE without merges (one token per byte), for
// server tests and benchmarks: token counts follow byte counts, so prompt lengths are exact.
namespace gecd::testing {

// Writes `dir`/tokenizer.json.
void WriteByteLevelTokenizer(const std::string& dir);

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_BYTE_LEVEL_TOKENIZER_H_

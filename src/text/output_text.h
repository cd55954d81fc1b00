#ifndef GECD_TEXT_OUTPUT_TEXT_H_
#define GECD_TEXT_OUTPUT_TEXT_H_

#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/tokenizer.h"

// The worker-side half of the request pipeline's output (the engine side, tokens and the stop
// rule, is engine/output_collector.h): what a client reads for a sequence's output tokens.
namespace gecd::text {

// The decoded bytes of `tokens` (special tokens skipped) with any ill-formed UTF-8 (a model can
// stop inside a multi-byte character) replaced by U+FFFD.
std::string OutputText(const model::Tokenizer& tokenizer, std::span<const int32_t> tokens);

}  // namespace gecd::text

#endif  // GECD_TEXT_OUTPUT_TEXT_H_

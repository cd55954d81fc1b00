#include "text/output_text.h"

#include "tokenizer/utf8.h"

namespace gecd::text {

std::string OutputText(const model::Tokenizer& tokenizer, std::span<const int32_t> tokens) {
  return model::ToValidUtf8(tokenizer.Decode(tokens));
}

}  // namespace gecd::text

#ifndef GECD_TOKENIZER_UTF8_H_
#define GECD_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// UTF-8 checks and code-point helpers shared by the tokenizers, which refuse malformed text up
// front so that their regex, normalizer and model stages can assume well-formed input.
namespace gecd::model {

// OK for well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF); otherwise
// InvalidArgument naming the byte offset of the first bad sequence.
absl::Status ValidateUtf8(std::string_view text);

// `text` with every ill-formed sequence replaced by U+FFFD, for bytes that must leave as text
// (a model can stop in the middle of a multi-byte character).
std::string ToValidUtf8(std::string_view text);

// Length of the UTF-8 sequence that starts with `lead` (1 for a continuation byte, so that a
// scan over arbitrary bytes always advances).
inline size_t Utf8SequenceLength(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Appends the UTF-8 encoding of code point `cp`.
void AppendUtf8(char32_t cp, std::string* out);

// Decodes the code point at text[*i] (text is valid UTF-8) and advances *i past it.
char32_t NextCodepoint(std::string_view text, size_t* i);

// Where the last code point of non-empty `text` starts.
size_t LastCodepointStart(std::string_view text);

bool IsAscii(std::string_view text);

// The Unicode White_Space property (Rust's char::is_whitespace): the tokenizers' lstrip/rstrip
// and the prompt builder's whitespace-only check.
bool IsWhiteSpace(char32_t c);

// `text` (valid UTF-8) in Unicode normalization form C (utf8proc).
absl::StatusOr<std::string> Nfc(std::string_view text);

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_UTF8_H_

#ifndef GECD_TOKENIZER_BYTE_LEVEL_H_
#define GECD_TOKENIZER_BYTE_LEVEL_H_

#include <array>
#include <string>
#include <string_view>

// GPT-2's byte-level alphabet, in which byte-level BPE vocabularies (tokenizer.json's ByteLevel
// pre-tokenizer and decoder) spell raw bytes.
namespace gecd::model {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves and the others move to
// U+0100 upwards, so every byte is spelled by one visible, non-space character.
const std::array<char32_t, 256>& ByteToCodepoint();

// `bytes` spelled in that alphabet (UTF-8), as vocabulary entries are.
std::string ByteLevelSpelling(std::string_view bytes);

// The raw bytes a vocabulary entry stands for. Like the ByteLevel decoder, an entry with a
// character outside the byte alphabet stands for its own UTF-8.
std::string ByteLevelBytes(std::string_view token);

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_BYTE_LEVEL_H_

#include "testing/byte_level_vocab.h"

namespace gecd::testing {

std::string ByteSpelling(int b) {
  const auto printable = [](int k) {
    return (k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE;
  };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int k = 0; k < b; ++k) cp += printable(k) ? 0 : 1;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

nlohmann::json ByteLevelVocab() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteSpelling(b)] = b;
  return vocab;
}

}  // namespace gecd::testing

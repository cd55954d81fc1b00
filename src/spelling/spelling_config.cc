#include "spelling/spelling_config.h"

namespace gecd::model {

absl::StatusOr<std::unique_ptr<SpellCorrector>> SpellCorrectorFrom(
    const config::SpellingSection& spelling) {
  if (spelling.dictionary.empty()) return nullptr;
  return SpellCorrector::Create(spelling.dictionary, spelling.lexicon, spelling.min_count,
                                spelling.instances);
}

}  // namespace gecd::model

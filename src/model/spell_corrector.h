#ifndef GECD_MODEL_SPELL_CORRECTOR_H_
#define GECD_MODEL_SPELL_CORRECTOR_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

class Hunspell;

namespace gecd::model {

// Corrects misspelled words before the model sees a text (config section `spelling`). Most of
// what learners' text needs on JFLEG is spelling, which a dictionary does better than a small
// model; the model then fixes the grammar. Owns a Hunspell dictionary and a lexicon of the
// words the model was trained on, with their counts.
//
// Only plain lower-case words are touched: a whitespace-separated token, less the punctuation
// around it, of ASCII letters with at most one inner apostrophe. A word the lexicon knows is
// kept (rare words of real text, which Hunspell may not know, stay as written); otherwise
// Hunspell checks it, and a misspelling takes Hunspell's first one-word suggestion that the
// lexicon has seen at least `min_count` times, so a correction is a common word. Names,
// acronyms, numbers, URLs and non-ASCII words are never changed.
//
// Cost: Hunspell's suggestions take ~26 ms per misspelled word (its n-gram search scans the
// dictionary), so decisions are cached (up to kCacheSize words): learners repeat their
// misspellings. Thread-safe: Hunspell is not, so its calls and the cache are serialized; they
// only run for words the lexicon does not know.
class SpellCorrector {
 public:
  // `dictionary`: a Hunspell dictionary without its extension (`<dictionary>.aff` and
  // `.dic`, e.g. /usr/share/hunspell/en_US); `lexicon`: lines "word<TAB>count". NotFound or
  // InvalidArgument naming the file (and line) when one is missing or malformed.
  static absl::StatusOr<std::unique_ptr<SpellCorrector>> Create(const std::string& dictionary,
                                                                const std::string& lexicon,
                                                                int min_count);
  ~SpellCorrector();

  // `text` with its misspelled words replaced; everything else byte for byte as it was.
  std::string Correct(std::string_view text) const;

 private:
  SpellCorrector(std::unique_ptr<Hunspell> hunspell, absl::flat_hash_map<std::string, int64_t> counts,
                 int min_count);

  static constexpr size_t kCacheSize = 100000;

  // The replacement for one candidate word, or "" to keep it.
  std::string Replacement(const std::string& word) const;
  std::string Suggest(const std::string& word) const;  // with mu_ held

  mutable std::mutex mu_;
  std::unique_ptr<Hunspell> hunspell_;  // guarded by mu_
  mutable absl::flat_hash_map<std::string, std::string> cache_;  // guarded by mu_
  absl::flat_hash_map<std::string, int64_t> counts_;
  int min_count_;
};

}  // namespace gecd::model

#endif  // GECD_MODEL_SPELL_CORRECTOR_H_

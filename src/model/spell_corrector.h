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
// kept (rare words of real text, which Hunspell may not know, stay as written), and so is a
// word the whole dictionary accepts. A misspelling takes the first suggestion, with the same
// first letter and within edit distance kMaxDistance, of a Hunspell that has the dictionary's
// rules but only the words the lexicon has seen at least `min_count` times in lower case: a
// correction is a common word. Names, acronyms, numbers, URLs and non-ASCII words are never
// changed.
//
// Cost: Hunspell's n-gram search scans its words for every suggestion (a few ms per misspelled
// word over the lexicon's common words, ~23 ms over the whole en_US dictionary; measured in
// bench/RESULTS.md), so decisions are cached (up to kCacheSize words): learners repeat their
// misspellings. Thread-safe: Hunspell is not, so its calls and
// the cache are serialized; they only run for words the lexicon does not know.
class SpellCorrector {
 public:
  // `dictionary`: a Hunspell dictionary without its extension (`<dictionary>.aff` and
  // `.dic`, e.g. /usr/share/hunspell/en_US); `lexicon`: lines "word<TAB>count", the count
  // being how often the word was written in lower case (0 for a name). NotFound or
  // InvalidArgument naming the file (and line) when one is missing or malformed.
  static absl::StatusOr<std::unique_ptr<SpellCorrector>> Create(const std::string& dictionary,
                                                                const std::string& lexicon,
                                                                int min_count);
  ~SpellCorrector();

  // `text` with its misspelled words replaced; everything else byte for byte as it was.
  std::string Correct(std::string_view text) const;

 private:
  SpellCorrector(std::unique_ptr<Hunspell> checker, std::unique_ptr<Hunspell> suggester,
                 absl::flat_hash_map<std::string, int64_t> counts, int min_count);

  static constexpr size_t kCacheSize = 100000;
  static constexpr int kMaxDistance = 2;

  // The replacement for one candidate word, or "" to keep it.
  std::string Replacement(const std::string& word) const;
  std::string Suggest(const std::string& word) const;  // with mu_ held

  mutable std::mutex mu_;
  std::unique_ptr<Hunspell> checker_;    // the whole dictionary; guarded by mu_
  std::unique_ptr<Hunspell> suggester_;  // its rules, the lexicon's common words; guarded by mu_
  mutable absl::flat_hash_map<std::string, std::string> cache_;  // guarded by mu_
  absl::flat_hash_map<std::string, int64_t> counts_;
  int min_count_;
};

}  // namespace gecd::model

#endif  // GECD_MODEL_SPELL_CORRECTOR_H_

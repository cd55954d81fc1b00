#ifndef GECD_SPELLING_SPELL_CORRECTOR_H_
#define GECD_SPELLING_SPELL_CORRECTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

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
// misspellings. A request's cost is bounded by its Budget: at most `max_lookups` uncached
// look-ups, none after its deadline, none for a word longer than kMaxWordBytes; the words left
// are kept as written. Thread-safe without a global lock: Hunspell is not thread-safe, so the
// corrector holds a pool of Hunspell pairs, each used by one call at a time, and a short lock
// guards only the cache.
class SpellCorrector {
 public:
  // `dictionary`: a Hunspell dictionary without its extension (`<dictionary>.aff` and
  // `.dic`, e.g. /usr/share/hunspell/en_US); `lexicon`: lines "word<TAB>count", the count
  // being how often the word was written in lower case (0 for a name). NotFound or
  // InvalidArgument naming the file (and line) when one is missing or malformed.
  // `instances`: Hunspell pairs in the pool, the calls that can look words up at once. The
  // first is loaded (and the files checked) before Create returns; the others load on a
  // thread of their own and join the pool as they are ready.
  static absl::StatusOr<std::unique_ptr<SpellCorrector>> Create(const std::string& dictionary,
                                                                const std::string& lexicon,
                                                                int min_count, int instances = 1);
  ~SpellCorrector();

  // What one call may spend on look-ups (cache hits and lexicon words are free).
  struct Budget {
    int max_lookups = std::numeric_limits<int>::max();
    // No look-up starts after it, and none waits for a pool instance past it.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };
  // What one call did.
  struct Result {
    std::string text;   // misspelled words replaced; everything else byte for byte as it was
    int lookups = 0;    // words sent to Hunspell (not cached)
    int corrected = 0;  // words replaced
    int skipped = 0;    // candidate words left as written because the budget ran out
  };
  Result Correct(std::string_view text, const Budget& budget) const;
  // Hunspell pairs loaded so far (1 .. instances).
  int instances_loaded() const;
  // Without limits: the same text whatever the load (eval, generate, tests).
  std::string Correct(std::string_view text) const { return Correct(text, Budget()).text; }

  static constexpr size_t kMaxWordBytes = 32;  // longer "words" are not language; kept

 private:
  struct Instance;  // a checker and a suggester Hunspell
  class Pool;

  // InvalidArgument naming spelling.dictionary when it does not load.
  static absl::StatusOr<Instance> LoadInstance(
      const std::string& dictionary, const absl::flat_hash_map<std::string, int64_t>& counts,
      int min_count);

  SpellCorrector(std::unique_ptr<Pool> pool, absl::flat_hash_map<std::string, int64_t> counts,
                 int min_count);

  static constexpr size_t kCacheSize = 100000;
  static constexpr int kMaxDistance = 2;

  std::optional<std::string> CachedReplacement(const std::string& word) const
      ABSL_LOCKS_EXCLUDED(cache_mu_);
  std::string Suggest(Instance& instance, const std::string& word) const;

  std::unique_ptr<Pool> pool_;
  mutable Mutex cache_mu_;
  // word -> replacement ("" keeps it)
  mutable absl::flat_hash_map<std::string, std::string> cache_ ABSL_GUARDED_BY(cache_mu_);
  absl::flat_hash_map<std::string, int64_t> counts_;
  int min_count_;
  std::atomic<bool> stop_loading_{false};
  std::thread loader_;  // loads the pool's instances after the first; joined on destruction
};

}  // namespace gecd::model

#endif  // GECD_SPELLING_SPELL_CORRECTOR_H_

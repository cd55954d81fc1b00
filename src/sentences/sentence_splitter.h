#ifndef GECD_SENTENCES_SENTENCE_SPLITTER_H_
#define GECD_SENTENCES_SENTENCE_SPLITTER_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// Where a whole text's sentences are, so the worker can correct each one as its own sequence
// (the model is trained on single sentences) and put the corrections back in place.
namespace gecd::sentences {

// Bytes [begin, end) of the UTF-8 text: one sentence, without the whitespace around it. The
// whitespace between sentences (spaces, line and paragraph breaks) belongs to no sentence, so a
// caller that rebuilds the text from corrected sentences and the original gaps never changes it.
struct SentenceSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
  bool operator==(const SentenceSpan&) const = default;
};

// ICU's sentence BreakIterator for `en@ss=standard` (Unicode's sentence rules, UAX #29, with
// CLDR's English abbreviation suppressions: "Mr.", "Prof.", "No." ...), then, with
// Options::fixes, gecd's corrections where ICU is measurably wrong on English text
// (tests/fixtures/sentences/golden.jsonl states both scores):
//   - no break after an initial or a dotted acronym ("J. R. R. Tolkien", "the U.S. Army")
//     before a capitalised word, unless that word is a common sentence opener ("the U.S. The");
//   - no break after "e.g.", "i.e.", "cf.", "vs.", "viz.", after a title ("Dr.", "St.", "Gen.")
//     before a capitalised word, or after a number's abbreviation ("p.", "Fig.", "Vol.") before
//     a number;
//   - no break after "!" or "?" (and closing quotes or brackets) before a lowercase word
//     ("\"Stop!\" he said.");
//   - a break after an ellipsis character (U+2026) before a capitalised word, as ICU already
//     breaks after "...";
//   - a list marker ("1.", "a)", "iv.") at the start of a line stays with its item;
//   - a single line break inside a sentence (hard-wrapped prose: the next line starts in
//     lowercase and the line before has no sentence end) is no break; a blank line always is.
// Decimals ("3.14", "$2.50") and punctuation after a closing quote or bracket ICU already gets
// right. Thread-safe: each Split works on its own clone of the prototype iterator.
class SentenceSplitter {
 public:
  struct Options {
    bool fixes = true;  // false: ICU's boundaries alone (for measuring the fixes)
  };

  // INTERNAL when ICU has no sentence rules for English (a broken ICU data package).
  static absl::StatusOr<SentenceSplitter> Create(Options options);
  static absl::StatusOr<SentenceSplitter> Create() { return Create(Options{}); }
  SentenceSplitter(SentenceSplitter&&) noexcept;
  SentenceSplitter& operator=(SentenceSplitter&&) noexcept;
  ~SentenceSplitter();

  // The sentences of `text` (UTF-8; an invalid sequence counts as U+FFFD), in order, disjoint,
  // none empty; none for a text of only whitespace, one for a text without a sentence end.
  std::vector<SentenceSpan> Split(std::string_view text) const;

 private:
  struct Prototype;
  SentenceSplitter(Options options, std::unique_ptr<Prototype> prototype);

  // ICU's boundaries as content spans (trimmed, empty ones dropped).
  std::vector<SentenceSpan> IcuSpans(std::string_view text) const;

  Options options_;
  std::unique_ptr<Prototype> prototype_;
};

}  // namespace gecd::sentences

#endif  // GECD_SENTENCES_SENTENCE_SPLITTER_H_

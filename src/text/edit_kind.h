#ifndef GECD_TEXT_EDIT_KIND_H_
#define GECD_TEXT_EDIT_KIND_H_

#include <string_view>

// A coarse kind for one edit, computed from the edit alone (what it replaced and with what), in
// the spirit of ERRANT's M/R/U:TYPE, so a client can colour or filter suggestions.
namespace gecd::text {

// The values are gecd.v1.EditKind's (worker/text_answer.cc casts one to the other).
enum class EditKind {
  kOther = 0,
  kSpelling = 1,         // one word for a close spelling of another word ("recieve" -> "receive")
  kPunctuation = 2,      // only punctuation differs
  kCapitalization = 3,   // only letter case differs
  kWhitespace = 4,       // only whitespace differs
  kWordForm = 5,         // one word for another form of it ("go" -> "goes", "child" -> "children")
  kWordChoice = 6,       // one word for a different word
  kMissingWord = 7,      // words inserted
  kUnnecessaryWord = 8,  // words deleted
  kWordOrder = 9,        // the same words in another order
};

// The kind of replacing `original` with `replacement` (bytes of UTF-8; words are runs of
// letters, digits and non-ASCII bytes). The checks run in the order of the list above, the
// first that holds wins: whitespace, case, punctuation; then, with the words both sides share
// at the start and end set aside, insertion, deletion, reordering, and for one word against one
// word its form (one is a prefix of the other, or they share a stem of 3 letters and half the
// shorter word), a spelling (edit distance at most 1 for words of up to 4 letters, else at most
// 2 or a quarter of the longer word), else a word choice. Anything else is kOther.
EditKind ClassifyEdit(std::string_view original, std::string_view replacement);

}  // namespace gecd::text

#endif  // GECD_TEXT_EDIT_KIND_H_

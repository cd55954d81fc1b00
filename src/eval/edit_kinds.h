#ifndef GECD_EVAL_EDIT_KINDS_H_
#define GECD_EVAL_EDIT_KINDS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "text/edit_kind.h"

// Precision and recall per edit kind, ERRANT-style: the edits a system proposes are the server's
// own edits of the source (text::ComputeEdits, the word-level diff clients get) against its
// output; the gold edits are the same diff of the source against each reference. A proposed
// edit matches when one of the reference's edits has the same span of the source and the same
// replacement. Both sides are classified by text::ClassifyEdit (the kinds clients get), which
// reads the edit alone, so a matched edit has the same kind on both sides and
//   precision(kind) = matched(kind) / proposed(kind), recall(kind) = matched(kind) /
//   reference(kind)
// count the same matches. With several references (JFLEG's four) each sentence is scored
// against the one reference that maximises F0.5 of the running totals with it, ties going to
// more matches, then fewer unmatched proposed and reference edits, then the first reference, as
// ERRANT's compare_m2 chooses. The choice is made on all kinds together, so a kind's matched and
// reference counts are those of the references chosen for the whole sentence (its proposed
// count depends on no reference).
//
// What this is not: the references carry no kind annotation, so a kind here is the classifier's
// reading of an edit, not a human label; and exact-span matching gives no credit for a partly
// right edit (JFLEG's references are fluency rewrites, whose adjacent changes the diff merges into
// one larger edit). The figures compare systems and settings; they are not comparable with
// published ERRANT scores.
namespace gecd::eval {

inline constexpr int kNumEditKinds = 10;  // text::EditKind's values, 0..9

// "spelling", "word form", …: the names `gecd correct` prints.
std::string_view EditKindName(text::EditKind kind);

struct EditCounts {
  int64_t proposed = 0;   // edits the system made
  int64_t reference = 0;  // edits of the chosen references
  int64_t matched = 0;    // proposed edits equal to one of the chosen reference's
  // NaN when there is nothing to divide by (no proposed, or no reference edit).
  double precision() const;
  double recall() const;
  // F0.5 (precision weighted twice recall, as GEC reports); 0 when either is 0, NaN when both
  // are undefined.
  double f05() const;
  EditCounts& operator+=(const EditCounts& other);
};

struct EditKindScore {
  std::array<EditCounts, kNumEditKinds> by_kind;  // [static_cast<int>(kind)]
  EditCounts overall;
  int64_t sentences = 0;  // scored
  int64_t skipped = 0;    // not scored (the system failed on them)
};

// Scores `hypotheses` (one per source) against `references[k][i]` (reference k of source i;
// at least one set). `skip[i]` (may be empty) leaves sentence i out: an output the system did
// not produce is no edit. The texts are compared as given, so the caller puts sources,
// hypotheses and references in one form first (JFLEG: Treebank tokens). InvalidArgument on a
// size mismatch or no reference.
absl::StatusOr<EditKindScore> ScoreEditKinds(
    const std::vector<std::string>& sources, const std::vector<std::string>& hypotheses,
    const std::vector<std::vector<std::string>>& references, const std::vector<bool>& skip = {});

}  // namespace gecd::eval

#endif  // GECD_EVAL_EDIT_KINDS_H_

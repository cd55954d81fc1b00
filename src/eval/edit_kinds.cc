#include "eval/edit_kinds.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "text/edits.h"

namespace gecd::eval {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One sentence's counts against one reference, per kind.
struct SentenceCounts {
  std::array<EditCounts, kNumEditKinds> by_kind;
  EditCounts all;
};

struct KindedEdit {
  text::TextEdit edit;
  int kind = 0;
};

std::vector<KindedEdit> EditsOf(std::string_view source, std::string_view target) {
  std::vector<KindedEdit> out;
  for (text::TextEdit& e : text::ComputeEdits(source, target)) {
    const int kind = static_cast<int>(
        text::ClassifyEdit(source.substr(e.start, e.end - e.start), e.replacement));
    out.push_back({std::move(e), kind});
  }
  return out;
}

SentenceCounts Compare(const std::vector<KindedEdit>& proposed,
                       const std::vector<KindedEdit>& reference) {
  SentenceCounts c;
  for (const KindedEdit& p : proposed) {
    ++c.by_kind[p.kind].proposed;
    ++c.all.proposed;
    for (const KindedEdit& r : reference) {
      if (r.edit == p.edit) {
        ++c.by_kind[p.kind].matched;
        ++c.all.matched;
        break;
      }
    }
  }
  for (const KindedEdit& r : reference) {
    ++c.by_kind[r.kind].reference;
    ++c.all.reference;
  }
  return c;
}

// F0.5 of counts, 0 where undefined: what the reference choice maximises.
double F05OrZero(const EditCounts& c) {
  const double f = c.f05();
  return std::isnan(f) ? 0 : f;
}

}  // namespace

std::string_view EditKindName(text::EditKind kind) {
  switch (kind) {
    case text::EditKind::kSpelling:
      return "spelling";
    case text::EditKind::kPunctuation:
      return "punctuation";
    case text::EditKind::kCapitalization:
      return "capitalization";
    case text::EditKind::kWhitespace:
      return "whitespace";
    case text::EditKind::kWordForm:
      return "word form";
    case text::EditKind::kWordChoice:
      return "word choice";
    case text::EditKind::kMissingWord:
      return "missing word";
    case text::EditKind::kUnnecessaryWord:
      return "unnecessary word";
    case text::EditKind::kWordOrder:
      return "word order";
    default:
      return "other";
  }
}

double EditCounts::precision() const {
  return proposed == 0 ? kNaN : static_cast<double>(matched) / static_cast<double>(proposed);
}
double EditCounts::recall() const {
  return reference == 0 ? kNaN : static_cast<double>(matched) / static_cast<double>(reference);
}
double EditCounts::f05() const {
  const double p = precision(), r = recall();
  if (std::isnan(p) && std::isnan(r)) return kNaN;
  if (std::isnan(p) || std::isnan(r) || p + r == 0) return 0;
  constexpr double kBeta2 = 0.25;
  return (1 + kBeta2) * p * r / (kBeta2 * p + r);
}
EditCounts& EditCounts::operator+=(const EditCounts& other) {
  proposed += other.proposed;
  reference += other.reference;
  matched += other.matched;
  return *this;
}

absl::StatusOr<EditKindScore> ScoreEditKinds(
    const std::vector<std::string>& sources, const std::vector<std::string>& hypotheses,
    const std::vector<std::vector<std::string>>& references, const std::vector<bool>& skip) {
  if (references.empty()) return absl::InvalidArgumentError("edit kinds: no reference");
  if (hypotheses.size() != sources.size() || (!skip.empty() && skip.size() != sources.size())) {
    return absl::InvalidArgumentError(absl::StrCat("edit kinds: ", hypotheses.size(),
                                                   " outputs for ", sources.size(), " sources"));
  }
  for (const auto& set : references) {
    if (set.size() != sources.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("edit kinds: ", set.size(), " references for ", sources.size(), " sources"));
    }
  }
  EditKindScore score;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!skip.empty() && skip[i]) {
      ++score.skipped;
      continue;
    }
    ++score.sentences;
    const std::vector<KindedEdit> proposed = EditsOf(sources[i], hypotheses[i]);
    SentenceCounts best;
    // (F0.5 with the totals, matches, -unmatched proposed, -unmatched reference): larger wins.
    std::tuple<double, int64_t, int64_t, int64_t> best_key;
    for (size_t k = 0; k < references.size(); ++k) {
      SentenceCounts c = Compare(proposed, EditsOf(sources[i], references[k][i]));
      EditCounts with = score.overall;
      with += c.all;
      const std::tuple<double, int64_t, int64_t, int64_t> key = {
          F05OrZero(with), c.all.matched, -(c.all.proposed - c.all.matched),
          -(c.all.reference - c.all.matched)};
      if (k == 0 || key > best_key) {
        best_key = key;
        best = std::move(c);
      }
    }
    for (int kind = 0; kind < kNumEditKinds; ++kind) score.by_kind[kind] += best.by_kind[kind];
    score.overall += best.all;
  }
  return score;
}

}  // namespace gecd::eval

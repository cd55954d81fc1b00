#ifndef GECD_EVAL_GLEU_H_
#define GECD_EVAL_GLEU_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

// GLEU, the JFLEG benchmark's metric, written from its published definition: Napoles et al.
// 2015, "Ground Truth for Grammatical Error Correction Metrics", as updated in "GLEU Without
// Tuning" (arXiv 1605.02592) and released with JFLEG (keisks/jfleg eval/gleu.py, read for the
// facts only: its code is not copied).
//
// For n = 1..4, over a whole corpus of (hypothesis H, source S, reference R) sentences:
//   p_n = max(0, Σ_g min(H_g, R_g) − Σ_{g ∈ S, g ∉ R} min(H_g, S_g)) / (|H| + 1 − n)
// summed numerator over summed denominator (each sentence's numerator is floored at 0 before
// summing, as the release does). The penalty counts hypothesis n-grams that occur in the
// source and in no position of the reference: the release's "source minus reference" removes
// every n-gram type the reference has, whatever its count, and so does this. Then
//   GLEU = exp(min(0, 1 − r/c)) · (p_1 p_2 p_3 p_4)^(1/4)
// with c the hypothesis and r the reference length in tokens, and 0 when any count is 0.
// Tokens are whitespace-separated, case-sensitive. With several references, every sentence
// gets one reference drawn at random per iteration and the reported score is the mean GLEU
// over the iterations (500 by default). The draws are the release's own: iteration j seeds
// Python's Mersenne Twister with 101·j and takes randint(0, R − 1) (Python 2) per sentence;
// this reimplements that generator, so scores are deterministic and equal the release's, and
// every hypothesis set scored against one corpus meets the same draws.
//
// How it was checked (tests/eval/gleu_test.cc): hand-computed examples (H = R gives 1; a
// source n-gram the reference dropped costs a match; brevity), the draw generator against
// CPython's outputs, and on JFLEG dev the copy-the-source baseline (38.2146) and the references
// scored against the other three, averaged (55.2679), against the JFLEG release's published
// 38.21 and 55.26.
namespace gecd::eval {

// A sentence's tokens, as ptb_text::SplitTokens splits a line.
using Tokens = std::vector<std::string>;

inline constexpr int kGleuOrder = 4;

// The counts of one hypothesis against one (source, reference) pair, or of a corpus (summed).
struct GleuStats {
  int64_t hyp_len = 0;
  int64_t ref_len = 0;
  std::array<int64_t, kGleuOrder> matches{};  // floored numerators
  std::array<int64_t, kGleuOrder> totals{};   // hypothesis n-grams
  GleuStats& operator+=(const GleuStats& other);
};

// GLEU (0..1) of summed statistics: 0 when any count is 0.
double GleuFromStats(const GleuStats& stats);

struct GleuScore {
  double mean = 0;    // 0..1, the mean over iterations
  double stddev = 0;  // over iterations (0 with one reference)
  int iterations = 0;
};

// A corpus to score against: tokenized sources and references and their n-gram counts, plus
// the reference drawn for every sentence in every iteration. Immutable once made.
class GleuCorpus {
 public:
  // `references[k][i]` is reference k of sentence i. InvalidArgument when there is no
  // reference, a reference set's size differs from the sources', or iterations < 1.
  static absl::StatusOr<GleuCorpus> Create(std::vector<Tokens> sources,
                                           std::vector<std::vector<Tokens>> references,
                                           int iterations = 500);

  // GLEU of `hypotheses` (one per source). InvalidArgument on a size mismatch.
  absl::StatusOr<GleuScore> Score(const std::vector<Tokens>& hypotheses) const;

  // Statistics of one hypothesis for sentence `i` against reference `k`.
  GleuStats SentenceStats(const Tokens& hypothesis, size_t i, size_t k) const;

  size_t num_sentences() const { return sources_.size(); }
  size_t num_references() const { return references_.size(); }
  int iterations() const { return iterations_; }

 private:
  using NgramCounts = absl::flat_hash_map<std::string, int64_t>;
  struct Counted {
    int64_t length = 0;
    std::array<NgramCounts, kGleuOrder> ngrams;  // [n - 1]
  };
  static Counted Count(const Tokens& tokens);

  std::vector<Counted> sources_;
  std::vector<std::vector<Counted>> references_;  // [k][i]
  int iterations_ = 0;
  std::vector<uint8_t> draws_;  // [iteration * num_sentences + i]: the reference drawn
};

// Output number `skip` (0-based) of the Python-seeded MT19937 behind the draws, for tests.
uint32_t PythonRandomForTest(uint32_t seed, int skip);

}  // namespace gecd::eval

#endif  // GECD_EVAL_GLEU_H_

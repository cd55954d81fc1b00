#include "eval/gleu.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gecd::eval {
namespace {

// MT19937 (Matsumoto & Nishimura 1998) seeded the way Python seeds it from an integer
// (init_by_array over the integer's 32-bit words), with Python 2's random() and
// randint(0, n - 1) = int(random() * n) on top: the generator behind the JFLEG release's
// reference draws, so that the draws here are the release's.
class PythonRandom {
 public:
  explicit PythonRandom(uint32_t seed) {
    // init_genrand(19650218), then init_by_array({seed}) (a zero seed is the key {0}).
    mt_[0] = 19650218u;
    for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
    int i = 1;
    int j = 0;
    for (int k = kN; k > 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + seed + j;
      ++i;
      j = 0;  // the key has one word
      if (i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    for (int k = kN - 1; k > 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - i;
      ++i;
      if (i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    mt_[0] = 0x80000000u;
    index_ = kN;
  }

  uint32_t Next32() {
    if (index_ >= kN) Twist();
    uint32_t y = mt_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  // Python's random(): 53 bits from two outputs.
  double Random() {
    const uint32_t a = Next32() >> 5;
    const uint32_t b = Next32() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }

  // Python 2's randint(0, n - 1).
  int Below(int n) { return static_cast<int>(Random() * n); }

 private:
  static constexpr int kN = 624;
  static constexpr int kM = 397;

  void Twist() {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }

  uint32_t mt_[kN];
  int index_ = kN;
};

}  // namespace

GleuStats& GleuStats::operator+=(const GleuStats& other) {
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  for (int n = 0; n < kGleuOrder; ++n) {
    matches[n] += other.matches[n];
    totals[n] += other.totals[n];
  }
  return *this;
}

double GleuFromStats(const GleuStats& s) {
  if (s.hyp_len == 0 || s.ref_len == 0) return 0;
  double log_precision = 0;
  for (int n = 0; n < kGleuOrder; ++n) {
    if (s.matches[n] == 0 || s.totals[n] == 0) return 0;
    log_precision += std::log(static_cast<double>(s.matches[n]) / static_cast<double>(s.totals[n]));
  }
  const double brevity =
      std::min(0.0, 1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.hyp_len));
  return std::exp(brevity + log_precision / kGleuOrder);
}

uint32_t PythonRandomForTest(uint32_t seed, int skip) {
  PythonRandom rng(seed);
  for (int i = 0; i < skip; ++i) rng.Next32();
  return rng.Next32();
}

GleuCorpus::Counted GleuCorpus::Count(const Tokens& tokens) {
  Counted c;
  c.length = static_cast<int64_t>(tokens.size());
  for (int n = 1; n <= kGleuOrder; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      // Tokens never contain whitespace, so a space joins them unambiguously.
      std::string key = tokens[i];
      for (int j = 1; j < n; ++j) absl::StrAppend(&key, " ", tokens[i + j]);
      ++c.ngrams[n - 1][key];
    }
  }
  return c;
}

absl::StatusOr<GleuCorpus> GleuCorpus::Create(std::vector<Tokens> sources,
                                              std::vector<std::vector<Tokens>> references,
                                              int iterations) {
  if (references.empty()) return absl::InvalidArgumentError("GLEU needs at least one reference");
  if (references.size() > 255)
    return absl::InvalidArgumentError("GLEU takes at most 255 references");
  if (iterations < 1) return absl::InvalidArgumentError("GLEU needs at least one iteration");
  for (size_t k = 0; k < references.size(); ++k) {
    if (references[k].size() != sources.size()) {
      return absl::InvalidArgumentError(absl::StrCat("reference set ", k, " has ",
                                                     references[k].size(),
                                                     " sentences, the source ", sources.size()));
    }
  }
  GleuCorpus corpus;
  corpus.iterations_ = iterations;
  corpus.sources_.reserve(sources.size());
  for (const Tokens& s : sources) corpus.sources_.push_back(Count(s));
  corpus.references_.resize(references.size());
  for (size_t k = 0; k < references.size(); ++k) {
    corpus.references_[k].reserve(sources.size());
    for (const Tokens& r : references[k]) corpus.references_[k].push_back(Count(r));
  }
  // One reference per sentence per iteration, drawn once so that every hypothesis set scored
  // against this corpus meets the same references (a paired comparison). As in the release:
  // iteration j reseeds with 101·j and draws randint(0, R − 1) for sentence 0, 1, …
  const int num_refs = static_cast<int>(references.size());
  corpus.draws_.resize(static_cast<size_t>(iterations) * sources.size());
  for (int it = 0; it < iterations; ++it) {
    PythonRandom rng(static_cast<uint32_t>(101u * static_cast<uint32_t>(it)));
    uint8_t* draw = corpus.draws_.data() + static_cast<size_t>(it) * sources.size();
    for (size_t i = 0; i < sources.size(); ++i) draw[i] = static_cast<uint8_t>(rng.Below(num_refs));
  }
  return corpus;
}

GleuStats GleuCorpus::SentenceStats(const Tokens& hypothesis, size_t i, size_t k) const {
  const Counted h = Count(hypothesis);
  const Counted& s = sources_[i];
  const Counted& r = references_[k][i];
  GleuStats stats;
  stats.hyp_len = h.length;
  stats.ref_len = r.length;
  for (int n = 0; n < kGleuOrder; ++n) {
    int64_t match = 0;
    int64_t penalty = 0;
    for (const auto& [gram, count] : h.ngrams[n]) {
      if (auto it = r.ngrams[n].find(gram); it != r.ngrams[n].end()) {
        match += std::min(count, it->second);
      } else if (auto src = s.ngrams[n].find(gram); src != s.ngrams[n].end()) {
        penalty += std::min(count, src->second);  // in the source, dropped by the reference
      }
    }
    stats.matches[n] = std::max<int64_t>(0, match - penalty);
    stats.totals[n] = std::max<int64_t>(0, h.length + 1 - (n + 1));
  }
  return stats;
}

absl::StatusOr<GleuScore> GleuCorpus::Score(const std::vector<Tokens>& hypotheses) const {
  const size_t num = sources_.size();
  if (hypotheses.size() != num) {
    return absl::InvalidArgumentError(
        absl::StrCat("GLEU: ", hypotheses.size(), " hypotheses for ", num, " sentences"));
  }
  const size_t num_refs = references_.size();
  std::vector<GleuStats> per_ref(num * num_refs);  // [i * num_refs + k]
  for (size_t i = 0; i < num; ++i) {
    for (size_t k = 0; k < num_refs; ++k)
      per_ref[i * num_refs + k] = SentenceStats(hypotheses[i], i, k);
  }
  std::vector<double> scores(iterations_);
  for (int it = 0; it < iterations_; ++it) {
    GleuStats total;
    const uint8_t* draw = draws_.data() + static_cast<size_t>(it) * num;
    for (size_t i = 0; i < num; ++i) total += per_ref[i * num_refs + draw[i]];
    scores[it] = GleuFromStats(total);
  }
  GleuScore result;
  result.iterations = iterations_;
  double sum = 0;
  for (double s : scores) sum += s;
  result.mean = sum / iterations_;
  double var = 0;
  for (double s : scores) var += (s - result.mean) * (s - result.mean);
  result.stddev = std::sqrt(var / iterations_);
  return result;
}

}  // namespace gecd::eval

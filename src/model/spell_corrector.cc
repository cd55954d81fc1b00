#include "model/spell_corrector.h"

#include <hunspell/hunspell.hxx>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace gecd::model {
namespace {

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }

// Lower-case ASCII letters with at most one apostrophe, not first or last ("don't").
bool IsPlainWord(std::string_view w) {
  int apostrophes = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (IsLower(w[i])) continue;
    if (w[i] != '\'' || i == 0 || i + 1 == w.size() || ++apostrophes > 1) return false;
  }
  return !w.empty();
}

// What may surround a word inside its token: ASCII punctuation of running text.
bool IsEdgePunctuation(char c) {
  static constexpr std::string_view kEdges = ".,;:!?\"'()[]{}";
  return kEdges.find(c) != std::string_view::npos;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

using Counts = absl::flat_hash_map<std::string, int64_t>;

absl::StatusOr<Counts> ReadLexicon(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  Counts counts;
  int line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    int64_t count = 0;
    if (tab == 0 || tab == std::string::npos ||
        !absl::SimpleAtoi(line.substr(tab + 1), &count) || count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_number, ": expected \"word<TAB>count\" with a count >= 0"));
    }
    counts[line.substr(0, tab)] += count;
  }
  if (counts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no words"));
  return counts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpellCorrector>> SpellCorrector::Create(
    const std::string& dictionary, const std::string& lexicon, int min_count) {
  for (const std::string& file : {dictionary + ".aff", dictionary + ".dic"}) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(file, error)) {
      return absl::NotFoundError(
          absl::StrCat("Hunspell dictionary file ", file, " not found (spelling.dictionary)"));
    }
  }
  ASSIGN_OR_RETURN(Counts counts, ReadLexicon(lexicon));
  auto hunspell = std::make_unique<Hunspell>((dictionary + ".aff").c_str(),
                                             (dictionary + ".dic").c_str());
  // Hunspell reports no load errors; a dictionary that knows not even "the" did not load.
  if (!hunspell->spell(std::string("the"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Hunspell dictionary ", dictionary, ".{aff,dic} did not load (spelling.dictionary)"));
  }
  return std::unique_ptr<SpellCorrector>(
      new SpellCorrector(std::move(hunspell), std::move(counts), min_count));
}

SpellCorrector::SpellCorrector(std::unique_ptr<Hunspell> hunspell,
                               absl::flat_hash_map<std::string, int64_t> counts, int min_count)
    : hunspell_(std::move(hunspell)), counts_(std::move(counts)), min_count_(min_count) {}

SpellCorrector::~SpellCorrector() = default;

std::string SpellCorrector::Replacement(const std::string& word) const {
  if (counts_.contains(word)) return "";
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = cache_.find(word); it != cache_.end()) return it->second;
  // Unbounded growth would be a leak under adversarial input; starting over is cheap.
  if (cache_.size() >= kCacheSize) cache_.clear();
  std::string replacement = Suggest(word);
  cache_.emplace(word, replacement);
  return replacement;
}

std::string SpellCorrector::Suggest(const std::string& word) const {
  if (hunspell_->spell(word)) return "";
  for (const std::string& s : hunspell_->suggest(word)) {
    if (!IsPlainWord(s)) continue;  // "a lot", "well-known", "Paris": not a one-word fix
    const auto it = counts_.find(s);
    if (it != counts_.end() && it->second >= min_count_) return s;
  }
  return "";
}

std::string SpellCorrector::Correct(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (IsSpace(text[i])) {
      out.push_back(text[i++]);
      continue;
    }
    size_t end = i;
    while (end < text.size() && !IsSpace(text[end])) ++end;
    size_t begin = i;
    size_t stop = end;
    while (begin < stop && IsEdgePunctuation(text[begin])) ++begin;
    while (stop > begin && IsEdgePunctuation(text[stop - 1])) --stop;
    const std::string word(text.substr(begin, stop - begin));
    std::string replacement = IsPlainWord(word) ? Replacement(word) : "";
    if (replacement.empty()) {
      out.append(text.substr(i, end - i));
    } else {
      out.append(text.substr(i, begin - i)).append(replacement).append(text.substr(stop, end - stop));
    }
    i = end;
  }
  return out;
}

}  // namespace gecd::model

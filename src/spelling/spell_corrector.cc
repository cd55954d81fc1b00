#include "spelling/spell_corrector.h"

#include <hunspell/hunspell.hxx>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gecd::model {
namespace {

using Counts = absl::flat_hash_map<std::string, int64_t>;

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

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent
// transpositions, the typos a keyboard makes.
int EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

absl::StatusOr<Counts> ReadLexicon(const std::string& path) {
  ASSIGN_OR_RETURN(const std::vector<std::string> lines, ReadLines(path));
  Counts counts;
  int line_number = 0;
  for (const std::string& line : lines) {
    ++line_number;
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    int64_t count = 0;
    if (tab == 0 || tab == std::string::npos || !absl::SimpleAtoi(line.substr(tab + 1), &count) ||
        count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": expected \"word<TAB>count\" with a count >= 0"));
    }
    counts[line.substr(0, tab)] += count;
  }
  if (counts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no words"));
  return counts;
}

// A Hunspell with the dictionary's rules (keyboard, replacement tables) over the lexicon's
// common words only: it suggests ~3.5x faster than the whole dictionary, and well inside the
// time limit Hunspell puts on its n-gram search, so its answers do not depend on the load.
// The words go through a temporary .dic: Hunspell sizes its word table from the file's first
// line, and add()ing them to an empty one chains them all and is slower than the whole
// dictionary.
absl::StatusOr<std::unique_ptr<Hunspell>> LoadSuggester(const std::string& aff,
                                                        const Counts& counts, int min_count) {
  std::string words;
  int n = 0;
  for (const auto& [word, count] : counts) {
    if (count < min_count || !IsPlainWord(word)) continue;
    words.append(word).push_back('\n');
    ++n;
  }
  std::string path = (std::filesystem::temp_directory_path() / "gecd-spelling-XXXXXX.dic").string();
  const int fd = mkstemps(path.data(), 4);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("spelling: cannot create ", path, ": ", std::strerror(errno)));
  }
  const std::string text = absl::StrCat(n, "\n", words);
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  std::unique_ptr<Hunspell> suggester;
  if (written) suggester = std::make_unique<Hunspell>(aff.c_str(), path.c_str());
  unlink(path.c_str());
  if (!written) return absl::InternalError(absl::StrCat("spelling: cannot write ", path));
  return suggester;
}

}  // namespace

struct SpellCorrector::Instance {
  std::unique_ptr<Hunspell> checker;    // the whole dictionary
  std::unique_ptr<Hunspell> suggester;  // its rules, the lexicon's common words
};

absl::StatusOr<SpellCorrector::Instance> SpellCorrector::LoadInstance(const std::string& dictionary,
                                                                      const Counts& counts,
                                                                      int min_count) {
  const std::string aff = dictionary + ".aff";
  auto checker = std::make_unique<Hunspell>(aff.c_str(), (dictionary + ".dic").c_str());
  // Hunspell reports no load errors; a dictionary that knows not even "the" did not load.
  if (!checker->spell(std::string("the"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Hunspell dictionary ", dictionary, ".{aff,dic} did not load (spelling.dictionary)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Hunspell> suggester, LoadSuggester(aff, counts, min_count));
  return Instance{std::move(checker), std::move(suggester)};
}

// Instances handed to one call at a time; a call that finds none free waits, up to its
// deadline. Instances join it as they load.
class SpellCorrector::Pool {
 public:
  void Add(Instance instance) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      instances_.push_back(std::move(instance));
      free_.push_back(&instances_.back());
    }
    cv_.Signal();
  }
  int size() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return static_cast<int>(instances_.size());
  }

  // Null when none came free before `deadline`.
  Instance* Acquire(std::chrono::steady_clock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    while (free_.empty()) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= left.zero()) return nullptr;
      cv_.WaitWithTimeout(&mu_, left);
    }
    Instance* instance = free_.back();
    free_.pop_back();
    return instance;
  }
  void Release(Instance* instance) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      free_.push_back(instance);
    }
    cv_.Signal();
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;  // signalled when an instance is added or released
  // A deque, so that free_'s pointers stay valid as instances are added.
  std::deque<Instance> instances_ ABSL_GUARDED_BY(mu_);
  std::vector<Instance*> free_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<SpellCorrector>> SpellCorrector::Create(
    const std::string& dictionary, const std::string& lexicon, int min_count, int instances) {
  if (instances < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spelling: ", instances, " Hunspell instances; need at least 1"));
  }
  for (const std::string& file : {dictionary + ".aff", dictionary + ".dic"}) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(file, error)) {
      return absl::NotFoundError(
          absl::StrCat("Hunspell dictionary file ", file, " not found (spelling.dictionary)"));
    }
  }
  ASSIGN_OR_RETURN(Counts counts, ReadLexicon(lexicon));
  ASSIGN_OR_RETURN(Instance first, LoadInstance(dictionary, counts, min_count));
  auto pool = std::make_unique<Pool>();
  pool->Add(std::move(first));
  std::unique_ptr<SpellCorrector> corrector(
      new SpellCorrector(std::move(pool), std::move(counts), min_count));
  // The others load while the first serves: each is ~0.1 s of a worker's start-up otherwise.
  // They load from the files the first loaded from, so they fail only where the machine does
  // (no temporary file for the suggester); the pool then stays smaller, which is logged.
  if (instances > 1) {
    SpellCorrector* c = corrector.get();
    corrector->loader_ = std::thread([c, dictionary, instances] {
      for (int i = 1; i < instances && !c->stop_loading_.load(); ++i) {
        absl::StatusOr<Instance> instance = LoadInstance(dictionary, c->counts_, c->min_count_);
        if (!instance.ok()) {
          spdlog::error("spelling: {} of {} Hunspell instances loaded; the next: {}", i, instances,
                        instance.status().ToString());
          return;
        }
        c->pool_->Add(*std::move(instance));
      }
    });
  }
  return corrector;
}

SpellCorrector::SpellCorrector(std::unique_ptr<Pool> pool, Counts counts, int min_count)
    : pool_(std::move(pool)), counts_(std::move(counts)), min_count_(min_count) {}

SpellCorrector::~SpellCorrector() {
  stop_loading_.store(true);
  if (loader_.joinable()) loader_.join();
}

int SpellCorrector::instances_loaded() const { return pool_->size(); }

std::optional<std::string> SpellCorrector::CachedReplacement(const std::string& word) const {
  MutexLock lock(&cache_mu_);
  if (const auto it = cache_.find(word); it != cache_.end()) return it->second;
  return std::nullopt;
}

std::string SpellCorrector::Suggest(Instance& instance, const std::string& word) const {
  if (instance.checker->spell(word)) return "";
  for (const std::string& s : instance.suggester->suggest(word)) {
    // Capitalized forms are not a fix of a lower-case word; a far n-gram match, or one that
    // changes the first letter (which writers seldom get wrong), is a guess.
    if (!IsPlainWord(s) || s[0] != word[0] || EditDistance(word, s) > kMaxDistance) continue;
    const auto it = counts_.find(s);
    if (it != counts_.end() && it->second >= min_count_) return s;
  }
  return "";
}

SpellCorrector::Result SpellCorrector::Correct(std::string_view text, const Budget& budget) const {
  Result result;
  std::string& out = result.text;
  out.reserve(text.size());
  Instance* instance = nullptr;  // acquired at the first look-up, held for the rest of the call
  size_t i = 0;
  while (i < text.size()) {
    if (absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
      out.push_back(text[i++]);
      continue;
    }
    size_t end = i;
    while (end < text.size() && !absl::ascii_isspace(static_cast<unsigned char>(text[end]))) ++end;
    size_t begin = i;
    size_t stop = end;
    while (begin < stop && IsEdgePunctuation(text[begin])) ++begin;
    while (stop > begin && IsEdgePunctuation(text[stop - 1])) --stop;
    const std::string word(text.substr(begin, stop - begin));
    std::string replacement;
    if (word.size() <= kMaxWordBytes && IsPlainWord(word) && !counts_.contains(word)) {
      if (std::optional<std::string> cached = CachedReplacement(word)) {
        replacement = *std::move(cached);
      } else if (result.lookups >= budget.max_lookups ||
                 std::chrono::steady_clock::now() >= budget.deadline ||
                 (instance == nullptr && (instance = pool_->Acquire(budget.deadline)) == nullptr)) {
        ++result.skipped;
      } else {
        ++result.lookups;
        replacement = Suggest(*instance, word);
        MutexLock lock(&cache_mu_);
        // Unbounded growth would be a leak under adversarial input; starting over is cheap.
        if (cache_.size() >= kCacheSize) cache_.clear();
        cache_.emplace(word, replacement);
      }
    }
    if (replacement.empty()) {
      out.append(text.substr(i, end - i));
    } else {
      ++result.corrected;
      out.append(text.substr(i, begin - i))
          .append(replacement)
          .append(text.substr(stop, end - stop));
    }
    i = end;
  }
  if (instance != nullptr) pool_->Release(instance);
  return result;
}

}  // namespace gecd::model

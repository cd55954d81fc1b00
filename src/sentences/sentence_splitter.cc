#include "sentences/sentence_splitter.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace gecd::sentences {

struct SentenceSplitter::Prototype {
  Mutex mu;  // ICU iterators are not thread-safe, cloning one included
  std::unique_ptr<icu::BreakIterator> iterator ABSL_GUARDED_BY(mu);

  std::unique_ptr<icu::BreakIterator> Clone() ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    return std::unique_ptr<icu::BreakIterator>(iterator->clone());
  }
};

namespace {

// The code point at byte `i` (U+FFFD for an ill-formed sequence) and the byte after it.
UChar32 At(std::string_view text, size_t i, size_t* next = nullptr) {
  int32_t j = static_cast<int32_t>(i);
  UChar32 c;
  U8_NEXT_OR_FFFD(reinterpret_cast<const uint8_t*>(text.data()), j,
                  static_cast<int32_t>(text.size()), c);
  if (next != nullptr) *next = static_cast<size_t>(j);
  return c;
}

// The code point ending at byte `i` and where it starts.
UChar32 Before(std::string_view text, size_t i, size_t* start) {
  int32_t j = static_cast<int32_t>(i);
  UChar32 c;
  U8_PREV_OR_FFFD(reinterpret_cast<const uint8_t*>(text.data()), 0, j, c);
  *start = static_cast<size_t>(j);
  return c;
}

bool IsSpace(UChar32 c) { return u_isUWhiteSpace(c); }
bool IsLineBreak(UChar32 c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}
// Closing quotes and brackets, which may follow a sentence's end.
bool IsCloser(UChar32 c) {
  return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}' || c == 0x2019 || c == 0x201D ||
         c == 0x00BB || c == 0x203A;
}
bool IsOpener(UChar32 c) {
  return c == '"' || c == '\'' || c == '(' || c == '[' || c == '{' || c == 0x2018 || c == 0x201C ||
         c == 0x00AB || c == 0x2039;
}
bool IsTerminal(UChar32 c) { return c == '.' || c == '!' || c == '?' || c == 0x2026; }

// Line breaks in whitespace `gap` ("\r\n" is one).
int LineBreaks(std::string_view gap) {
  int n = 0;
  for (size_t i = 0; i < gap.size();) {
    size_t next;
    const UChar32 c = At(gap, i, &next);
    if (IsLineBreak(c) && !(c == '\r' && next < gap.size() && gap[next] == '\n')) ++n;
    i = next;
  }
  return n;
}

// The last code point of `s` that is not a closing quote or bracket (0: none).
UChar32 LastBeforeClosers(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t start;
    const UChar32 c = Before(s, i, &start);
    if (!IsCloser(c)) return c;
    i = start;
  }
  return 0;
}

// The first word of `s` (up to whitespace), and its last word.
std::string_view FirstWord(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next;
    if (IsSpace(At(s, i, &next))) break;
    i = next;
  }
  return s.substr(0, i);
}
std::string_view LastWord(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t start;
    if (IsSpace(Before(s, i, &start))) break;
    i = start;
  }
  return s.substr(i);
}

// `word` without leading opening quotes and brackets.
std::string_view StripOpeners(std::string_view word) {
  while (!word.empty()) {
    size_t next;
    if (!IsOpener(At(word, 0, &next))) break;
    word.remove_prefix(next);
  }
  return word;
}
// `word` without trailing punctuation (for comparing a word with a list: "However," is
// "However").
std::string_view StripTrailingPunctuation(std::string_view word) {
  while (!word.empty() && absl::ascii_ispunct(static_cast<unsigned char>(word.back()))) {
    word.remove_suffix(1);
  }
  return word;
}

template <size_t N>
bool IsOneOf(std::string_view word, const std::array<std::string_view, N>& list) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

// Never the end of a sentence.
constexpr std::array<std::string_view, 7> kNeverFinal = {"e.g.", "i.e.", "cf.", "vs.",
                                                         "viz.", "E.g.", "I.e."};
// Titles: before a capitalised word (a name) they do not end a sentence. ICU's English
// suppressions already cover "Mr.", "Mrs.", "Ms." and "Prof.".
constexpr std::array<std::string_view, 16> kTitles = {
    "Dr.",  "Drs.", "St.",  "Mt.",  "Gen.", "Capt.", "Sgt.", "Lt.",
    "Col.", "Rev.", "Gov.", "Sen.", "Rep.", "Pres.", "Fr.",  "Hon."};
// Abbreviations that come before a number.
constexpr std::array<std::string_view, 16> kBeforeNumber = {
    "p.",   "pp.",  "No.", "no.", "Nos.", "Fig.", "fig.", "Figs.",
    "Vol.", "vol.", "Ch.", "ch.", "Sec.", "sec.", "Art.", "approx."};
// Words that commonly open an English sentence: after an initial or an acronym they say the
// sentence ended there ("... in the U.S. The ...").
constexpr std::array<std::string_view, 64> kOpeners = {
    "The",   "A",      "An",       "It",     "Its",   "He",    "She",   "We",    "They", "I",
    "You",   "This",   "That",     "These",  "Those", "There", "Then",  "But",   "And",  "So",
    "Yet",   "Or",     "However",  "In",     "On",    "At",    "By",    "For",   "From", "To",
    "After", "Before", "When",     "While",  "If",    "As",    "His",   "Her",   "Our",  "Their",
    "My",    "Your",   "What",     "Why",    "How",   "Who",   "Where", "Which", "Yes",  "No",
    "Also",  "Now",    "Today",    "Still",  "Thus",  "Many",  "Some",  "All",   "One",  "Each",
    "Most",  "Since",  "Although", "Because"};

// A single capital letter with a full stop ("J."), a dotted acronym of single letters ("U.S.",
// "U.K."), or "etc.".
bool IsInitialOrAcronym(std::string_view word) {
  if (word == "etc.") return true;
  if (word.size() < 2 || word.size() % 2 != 0) return false;
  bool upper = false;
  for (size_t i = 0; i < word.size(); i += 2) {
    const auto c = static_cast<unsigned char>(word[i]);
    if (!absl::ascii_isalpha(c) || word[i + 1] != '.') return false;
    upper = upper || absl::ascii_isupper(c);
  }
  return upper;
}

// Whether only whitespace lies between a line break (or the text's start) and byte `i`.
bool StartsLine(std::string_view text, size_t i) {
  while (i > 0) {
    size_t start;
    const UChar32 c = Before(text, i, &start);
    if (IsLineBreak(c)) return true;
    if (!IsSpace(c)) return false;
    i = start;
  }
  return true;
}

bool StartsUpper(std::string_view s) { return !s.empty() && u_isupper(At(s, 0)); }
bool StartsLower(std::string_view s) { return !s.empty() && u_islower(At(s, 0)); }
bool StartsDigit(std::string_view s) { return !s.empty() && absl::ascii_isdigit(s[0]); }

// A list marker alone: "1.", "12)", "a.", "b)", "iv.".
bool IsListMarker(std::string_view s) {
  if (s.size() < 2 || (s.back() != '.' && s.back() != ')')) return false;
  const std::string_view body = s.substr(0, s.size() - 1);
  if (body.size() <= 3 && std::all_of(body.begin(), body.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    return true;
  }
  if (body.size() == 1 && absl::ascii_isalpha(static_cast<unsigned char>(body[0]))) return true;
  return body.size() <= 4 && std::all_of(body.begin(), body.end(), [](char c) {
           return c == 'i' || c == 'v' || c == 'x' || c == 'I' || c == 'V' || c == 'X';
         });
}

// Whether the sentences `a` and `b`, with whitespace `gap` between them, are one sentence
// that ICU broke.
bool Joined(std::string_view text, SentenceSpan a, SentenceSpan b) {
  const std::string_view first = text.substr(a.begin, a.end - a.begin);
  const std::string_view second = text.substr(b.begin, b.end - b.begin);
  const int breaks = LineBreaks(text.substr(a.end, b.begin - a.end));
  if (breaks >= 2) return false;  // a paragraph break
  if (StartsLine(text, a.begin) && IsListMarker(first)) return true;
  if (breaks == 1) {
    // Hard-wrapped prose: the line has no sentence end and the next goes on in lowercase (and
    // is not the next item of a list: "b) pears").
    return !IsTerminal(LastBeforeClosers(first)) && StartsLower(second) &&
           !IsListMarker(FirstWord(second));
  }
  const std::string_view last = LastWord(first);
  const std::string_view next = FirstWord(second);
  const UChar32 end = LastBeforeClosers(last);
  if ((end == '!' || end == '?') && StartsLower(second)) return true;
  if (last.empty() || last.back() != '.') return false;
  const std::string_view word = StripOpeners(last);
  if (IsOneOf(word, kNeverFinal)) return true;
  if (IsOneOf(word, kTitles) && StartsUpper(next)) return true;
  if (IsOneOf(word, kBeforeNumber) && StartsDigit(next)) return true;
  return IsInitialOrAcronym(word) && StartsUpper(StripOpeners(next)) &&
         !IsOneOf(StripTrailingPunctuation(StripOpeners(next)), kOpeners);
}

// Splits `span` after every ellipsis character (with its closers) that whitespace and a
// capitalised word follow: ICU does not count U+2026 as a sentence end.
void SplitAtEllipses(std::string_view text, SentenceSpan span, std::vector<SentenceSpan>& out) {
  size_t i = span.begin;
  while (i < span.end) {
    size_t next;
    const UChar32 c = At(text, i, &next);
    if (c == 0x2026) {
      size_t end = next;
      size_t after;
      while (end < span.end && IsCloser(At(text, end, &after))) end = after;
      size_t begin = end;
      while (begin < span.end && IsSpace(At(text, begin, &after))) begin = after;
      if (begin > end && begin < span.end &&
          StartsUpper(StripOpeners(text.substr(begin, span.end - begin)))) {
        out.push_back({span.begin, static_cast<uint32_t>(end)});
        span.begin = static_cast<uint32_t>(begin);
        next = begin;
      }
    }
    i = next;
  }
  out.push_back(span);
}

}  // namespace

absl::StatusOr<SentenceSplitter> SentenceSplitter::Create(Options options) {
  UErrorCode status = U_ZERO_ERROR;
  auto prototype = std::make_unique<Prototype>();
  std::unique_ptr<icu::BreakIterator> iterator(
      icu::BreakIterator::createSentenceInstance(icu::Locale("en@ss=standard"), status));
  if (U_FAILURE(status) || iterator == nullptr) {
    return absl::InternalError(absl::StrCat("ICU has no English sentence rules (",
                                            u_errorName(status), "): is libicu's data installed?"));
  }
  {
    MutexLock lock(&prototype->mu);
    prototype->iterator = std::move(iterator);
  }
  return SentenceSplitter(options, std::move(prototype));
}

SentenceSplitter::SentenceSplitter(Options options, std::unique_ptr<Prototype> prototype)
    : options_(options), prototype_(std::move(prototype)) {}
SentenceSplitter::SentenceSplitter(SentenceSplitter&&) noexcept = default;
SentenceSplitter& SentenceSplitter::operator=(SentenceSplitter&&) noexcept = default;
SentenceSplitter::~SentenceSplitter() = default;

std::vector<SentenceSpan> SentenceSplitter::IcuSpans(std::string_view text) const {
  std::vector<SentenceSpan> spans;
  std::unique_ptr<icu::BreakIterator> iterator = prototype_->Clone();
  UErrorCode status = U_ZERO_ERROR;
  // Over the UTF-8 bytes themselves: ICU's boundaries are then byte offsets.
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  if (U_FAILURE(status)) return {{0, static_cast<uint32_t>(text.size())}};
  iterator->setText(utext, status);
  auto add = [&](size_t begin, size_t end) {
    size_t after;
    while (begin < end && IsSpace(At(text, begin, &after))) begin = after;
    size_t start;
    while (end > begin && IsSpace(Before(text, end, &start))) end = start;
    if (end > begin) spans.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
  };
  size_t previous = 0;
  for (int32_t b = iterator->next(); b != icu::BreakIterator::DONE; b = iterator->next()) {
    add(previous, static_cast<size_t>(b));
    previous = static_cast<size_t>(b);
  }
  if (previous < text.size()) add(previous, text.size());
  iterator.reset();  // it reads utext to the end
  utext_close(utext);
  return spans;
}

std::vector<SentenceSpan> SentenceSplitter::Split(std::string_view text) const {
  std::vector<SentenceSpan> icu = IcuSpans(text);
  if (!options_.fixes) return icu;
  std::vector<SentenceSpan> split;
  for (const SentenceSpan& span : icu) SplitAtEllipses(text, span, split);
  std::vector<SentenceSpan> joined;
  for (const SentenceSpan& span : split) {
    if (!joined.empty() && Joined(text, joined.back(), span)) {
      joined.back().end = span.end;
    } else {
      joined.push_back(span);
    }
  }
  return joined;
}

}  // namespace gecd::sentences

#include "text/edit_kind.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"

namespace gecd::text {
namespace {

bool IsWordByte(unsigned char c) { return c >= 0x80 || absl::ascii_isalnum(c); }

// The text without the bytes `drop` says to drop.
template <typename Drop>
std::string Without(std::string_view s, Drop drop) {
  std::string out;
  for (char c : s) {
    if (!drop(static_cast<unsigned char>(c))) out.push_back(c);
  }
  return out;
}

// The words of `s`, lowercased (ASCII).
std::vector<std::string> Words(std::string_view s) {
  std::vector<std::string> words;
  for (size_t i = 0; i < s.size();) {
    if (!IsWordByte(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && IsWordByte(static_cast<unsigned char>(s[j]))) ++j;
    words.push_back(absl::AsciiStrToLower(std::string(s.substr(i, j - i))));
    i = j;
  }
  return words;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

EditKind OneWordForAnother(const std::string& a, const std::string& b) {
  const size_t shorter = std::min(a.size(), b.size());
  size_t stem = 0;
  while (stem < shorter && a[stem] == b[stem]) ++stem;
  if (stem == shorter || (stem >= 3 && 2 * stem >= shorter)) return EditKind::kWordForm;
  const size_t longer = std::max(a.size(), b.size());
  // A typo or two in a word of five letters or more, one in a shorter word.
  const size_t typos = longer <= 4 ? 1 : std::max<size_t>(2, longer / 4);
  if (EditDistance(a, b) <= typos) return EditKind::kSpelling;
  return EditKind::kWordChoice;
}

}  // namespace

EditKind ClassifyEdit(std::string_view original, std::string_view replacement) {
  const auto space = [](unsigned char c) { return absl::ascii_isspace(c); };
  if (Without(original, space) == Without(replacement, space)) return EditKind::kWhitespace;
  if (absl::AsciiStrToLower(std::string(original)) ==
      absl::AsciiStrToLower(std::string(replacement))) {
    return EditKind::kCapitalization;
  }
  std::vector<std::string> a = Words(original), b = Words(replacement);
  if (a == b) return EditKind::kPunctuation;
  // The words both sides share at the start and the end are context, not the edit.
  size_t front = 0;
  while (front < a.size() && front < b.size() && a[front] == b[front]) ++front;
  size_t back = 0;
  while (back < a.size() - front && back < b.size() - front &&
         a[a.size() - 1 - back] == b[b.size() - 1 - back]) {
    ++back;
  }
  a = std::vector<std::string>(a.begin() + front, a.end() - back);
  b = std::vector<std::string>(b.begin() + front, b.end() - back);
  if (a.empty()) return EditKind::kMissingWord;
  if (b.empty()) return EditKind::kUnnecessaryWord;
  if (a.size() == 1 && b.size() == 1) return OneWordForAnother(a[0], b[0]);
  std::vector<std::string> sorted_a = a, sorted_b = b;
  std::sort(sorted_a.begin(), sorted_a.end());
  std::sort(sorted_b.begin(), sorted_b.end());
  if (sorted_a == sorted_b) return EditKind::kWordOrder;
  return EditKind::kOther;
}

}  // namespace gecd::text

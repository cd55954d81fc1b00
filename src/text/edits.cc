#include "text/edits.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/ascii.h"

namespace gecd::text {

namespace {

// Above this many cells the middle of the diff is replaced wholesale: the texts are capped by
// the configured limits, so this only bounds a pathological pair, and the result stays exact.
constexpr size_t kMaxDiffCells = size_t{1} << 22;

// Non-ASCII bytes count as word bytes so that a UTF-8 sequence is never cut.
bool IsWordByte(unsigned char c) {
  return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::vector<std::string_view> SplitPieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t j = i + 1;
    if (absl::ascii_isspace(c)) {
      while (j < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[j]))) ++j;
    } else if (IsWordByte(c)) {
      while (j < text.size() && IsWordByte(static_cast<unsigned char>(text[j]))) ++j;
    }
    pieces.push_back(text.substr(i, j - i));
    i = j;
  }
  return pieces;
}

// A changed region: source pieces [a0, a1) became target pieces [b0, b1).
struct Hunk {
  size_t a0, a1, b0, b1;
};

// Changed regions between a and b, in order, from a longest common subsequence of the pieces.
std::vector<Hunk> DiffPieces(const std::vector<std::string_view>& a,
                             const std::vector<std::string_view>& b) {
  // Corrections touch a few words, so trimming the common ends leaves a small table.
  size_t lo = 0;
  while (lo < a.size() && lo < b.size() && a[lo] == b[lo]) ++lo;
  size_t a_hi = a.size(), b_hi = b.size();
  while (a_hi > lo && b_hi > lo && a[a_hi - 1] == b[b_hi - 1]) --a_hi, --b_hi;
  const size_t n = a_hi - lo, m = b_hi - lo;
  if (n == 0 && m == 0) return {};
  if (n == 0 || m == 0 || (n + 1) * (m + 1) > kMaxDiffCells) return {{lo, a_hi, lo, b_hi}};

  // lcs[i * (m + 1) + j]: LCS length of a[lo + i..a_hi) and b[lo + j..b_hi).
  std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);
  const auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      at(i, j) =
          a[lo + i] == b[lo + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    }
  }
  std::vector<Hunk> hunks;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[lo + i] == b[lo + j]) {
      ++i, ++j;
      continue;
    }
    Hunk h{lo + i, lo + i, lo + j, lo + j};
    while ((i < n || j < m) && !(i < n && j < m && a[lo + i] == b[lo + j])) {
      if (j < m && (i == n || at(i, j + 1) >= at(i + 1, j))) {
        ++j;
      } else {
        ++i;
      }
    }
    h.a1 = lo + i;
    h.b1 = lo + j;
    hunks.push_back(h);
  }
  return hunks;
}

bool AllSpace(const std::vector<std::string_view>& pieces, size_t from, size_t to) {
  for (size_t k = from; k < to; ++k) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(pieces[k][0]))) return false;
  }
  return true;
}

}  // namespace

std::vector<TextEdit> ComputeEdits(std::string_view source, std::string_view target) {
  const std::vector<std::string_view> a = SplitPieces(source);
  const std::vector<std::string_view> b = SplitPieces(target);
  std::vector<Hunk> hunks = DiffPieces(a, b);

  // Merge hunks separated only by unchanged whitespace: one edit per changed phrase.
  std::vector<Hunk> merged;
  for (const Hunk& h : hunks) {
    if (!merged.empty() && AllSpace(a, merged.back().a1, h.a0)) {
      merged.back().a1 = h.a1;
      merged.back().b1 = h.b1;
    } else {
      merged.push_back(h);
    }
  }

  // Piece indices to byte offsets; an index one past the end is the text's end.
  const auto offset = [](const std::vector<std::string_view>& pieces, std::string_view text,
                         size_t k) -> size_t {
    return k < pieces.size() ? static_cast<size_t>(pieces[k].data() - text.data()) : text.size();
  };
  std::vector<TextEdit> edits;
  edits.reserve(merged.size());
  for (const Hunk& h : merged) {
    const size_t t0 = offset(b, target, h.b0), t1 = offset(b, target, h.b1);
    edits.push_back({static_cast<uint32_t>(offset(a, source, h.a0)),
                     static_cast<uint32_t>(offset(a, source, h.a1)),
                     std::string(target.substr(t0, t1 - t0))});
  }
  return edits;
}

std::string ApplyEdits(std::string_view source, std::span<const TextEdit> edits) {
  std::string out;
  out.reserve(source.size());
  size_t pos = 0;
  for (const TextEdit& e : edits) {
    out.append(source.substr(pos, e.start - pos));
    out.append(e.replacement);
    pos = e.end;
  }
  out.append(source.substr(pos));
  return out;
}

}  // namespace gecd::text

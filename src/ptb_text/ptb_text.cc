#include "ptb_text/ptb_text.h"

#include <array>
#include <cctype>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace gecd::ptb_text {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Clitics written as their own token, compared in lower case.
constexpr std::array<std::string_view, 7> kClitics = {"'s", "'m", "'d", "'re", "'ve", "'ll", "n't"};

bool IsClitic(std::string_view token) {
  const std::string lower = absl::AsciiStrToLower(std::string(token));
  for (std::string_view c : kClitics) {
    if (lower == c) return true;
  }
  return false;
}

// Tokens that attach to the token before them.
bool AttachesLeft(std::string_view t) {
  static constexpr std::array<std::string_view, 13> kLeft = {".", ",", ";", ":",   "?",  "!", "%",
                                                             ")", "]", "}", "...", "''", "'"};
  for (std::string_view l : kLeft) {
    if (t == l) return true;
  }
  return IsClitic(t);
}

// Tokens the next token attaches to.
bool AttachesRight(std::string_view t) {
  return t == "(" || t == "[" || t == "{" || t == "$" || t == "``";
}

// Splits a clitic or a possessive ' off the end of `piece`.
void SplitClitic(const std::string& piece, std::vector<std::string>* out) {
  const std::string lower = absl::AsciiStrToLower(piece);
  for (std::string_view c : kClitics) {
    if (lower.size() > c.size() && lower.compare(lower.size() - c.size(), c.size(), c) == 0) {
      // "n't" needs a letter before it; "'s" etc. need anything but another quote.
      const char before = piece[piece.size() - c.size() - 1];
      if (before == '\'') break;
      out->push_back(piece.substr(0, piece.size() - c.size()));
      out->push_back(piece.substr(piece.size() - c.size()));
      return;
    }
  }
  if (piece.size() > 1 && piece.back() == '\'' && IsAlpha(piece[piece.size() - 2])) {
    out->push_back(piece.substr(0, piece.size() - 1));
    out->push_back("'");
    return;
  }
  out->push_back(piece);
}

// Splits one whitespace-free word at its punctuation.
void SplitWord(std::string_view word, std::vector<std::string>* out) {
  std::string cur;
  const auto flush = [&] {
    if (!cur.empty()) SplitClitic(cur, out);
    cur.clear();
  };
  for (size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    const char next = i + 1 < word.size() ? word[i + 1] : '\0';
    if (c == '.' && word.substr(i, 3) == "...") {
      flush();
      size_t j = i;
      while (j < word.size() && word[j] == '.') ++j;
      out->push_back(std::string(word.substr(i, j - i)));
      i = j - 1;
    } else if (c == ',' || c == ':') {
      if (IsDigit(next) && !cur.empty() && IsDigit(cur.back())) {
        cur.push_back(c);  // 1,000 and 10:30
      } else {
        flush();
        out->push_back(std::string(1, c));
      }
    } else if (c == '`' && next == '`') {
      flush();
      out->push_back("``");
      ++i;
    } else if (c == '\'' && next == '\'') {
      flush();
      out->push_back("''");
      ++i;
    } else if (c == ';' && cur.size() > 1 && cur[0] == '&') {
      cur.push_back(c);  // an HTML entity such as "&amp;"
    } else if (c == '"' || c == '(' || c == ')' || c == '[' || c == ']' || c == '{' || c == '}' ||
               c == '?' || c == '!' || c == ';' || c == '%' || c == '$') {
      flush();
      out->push_back(std::string(1, c));
    } else {
      cur.push_back(c);
    }
  }
  flush();
}

}  // namespace

std::vector<std::string> SplitTokens(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  const auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > start) out.emplace_back(line.substr(start, i - start));
  }
  return out;
}

std::string NormalizeWhitespace(std::string_view text) {
  return absl::StrJoin(SplitTokens(text), " ");
}

std::string PtbTokenize(std::string_view text) {
  const std::string ascii =
      absl::StrReplaceAll(absl::string_view(text.data(), text.size()), {{"\xE2\x80\x9C", "\""},
                                                                        {"\xE2\x80\x9D", "\""},
                                                                        {"\xE2\x80\x98", "'"},
                                                                        {"\xE2\x80\x99", "'"},
                                                                        {"\xE2\x80\xA6", "..."}});
  std::vector<std::string> words = SplitTokens(ascii);
  // The sentence-final period (before closing quotes and brackets) is a word of its own.
  if (!words.empty()) {
    std::string& w = words.back();
    size_t end = w.size();
    while (end > 0 && std::string_view("\"')]}").find(w[end - 1]) != std::string_view::npos) --end;
    size_t dots = 0;
    while (dots < end && w[end - 1 - dots] == '.') ++dots;
    // "word." and "etc.." end the sentence with a period; "..." is an ellipsis.
    if (end > dots && (dots == 1 || dots == 2)) {
      std::string tail = w.substr(end - 1);
      w.resize(end - 1);
      words.push_back(std::move(tail));
    }
  }
  std::vector<std::string> tokens;
  for (const std::string& word : words) SplitWord(word, &tokens);
  return absl::StrJoin(tokens, " ");
}

std::string PtbDetokenize(std::string_view tokenized) {
  std::string out;
  bool quote_open = false;  // inside a straight double quote
  bool glue_next = true;    // no space before the next token
  for (std::string token : SplitTokens(tokenized)) {
    if (token == "-LRB-") token = "(";
    if (token == "-RRB-") token = ")";
    bool left = AttachesLeft(token);
    bool right = AttachesRight(token);
    if (token == "\"") {
      left = quote_open;    // a closing quote attaches left,
      right = !quote_open;  // an opening one right
      quote_open = !quote_open;
    } else if (token == "``") {
      token = "\"";
    } else if (token == "''") {
      token = "\"";
    }
    if (!out.empty() && !glue_next && !left) out.push_back(' ');
    out += token;
    glue_next = right;
  }
  return out;
}

}  // namespace gecd::ptb_text

#include "eval/synthetic.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ptb_text/ptb_text.h"

namespace gecd::eval {

absl::StatusOr<std::vector<SyntheticExample>> ParseSyntheticTsv(std::string_view content,
                                                                std::string_view path) {
  std::vector<SyntheticExample> examples;
  int line_no = 0;
  for (absl::string_view raw :
       absl::StrSplit(absl::string_view(content.data(), content.size()), '\n')) {
    ++line_no;
    std::string line(raw);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || ptb_text::NormalizeWhitespace(line).empty()) continue;
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    const auto error = [&](std::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(path), ":", line_no, ": ", std::string(what)));
    };
    if (fields.size() != 3) {
      return error(absl::StrCat("expected error_type<TAB>source<TAB>target, found ", fields.size(),
                                " tab-separated field", fields.size() == 1 ? "" : "s"));
    }
    SyntheticExample ex{fields[0], fields[1], fields[2], line_no};
    if (ex.error_type.empty() || ptb_text::NormalizeWhitespace(ex.source).empty() ||
        ptb_text::NormalizeWhitespace(ex.target).empty()) {
      return error("empty field");
    }
    if (ex.error_type == kNoErrorType &&
        ptb_text::NormalizeWhitespace(ex.source) != ptb_text::NormalizeWhitespace(ex.target)) {
      return error("error type 'none' but the target differs from the source");
    }
    examples.push_back(std::move(ex));
  }
  if (examples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": no examples"));
  }
  return examples;
}

absl::StatusOr<std::vector<SyntheticExample>> LoadSyntheticFile(const std::string& path,
                                                                int limit) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (!in) return absl::DataLossError(absl::StrCat(path, ": read error"));
  absl::StatusOr<std::vector<SyntheticExample>> examples = ParseSyntheticTsv(buffer.str(), path);
  if (examples.ok() && limit > 0 && static_cast<size_t>(limit) < examples->size()) {
    examples->resize(limit);
  }
  return examples;
}

absl::StatusOr<SyntheticScore> ScoreSynthetic(const std::vector<SyntheticExample>& examples,
                                              const std::vector<std::string>& outputs) {
  if (examples.size() != outputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(outputs.size(), " outputs for ", examples.size(), " synthetic examples"));
  }
  std::map<std::string, ExactMatch> by_type;
  SyntheticScore score;
  for (size_t i = 0; i < examples.size(); ++i) {
    const SyntheticExample& ex = examples[i];
    const std::string out = ptb_text::NormalizeWhitespace(outputs[i]);
    const bool exact = out == ptb_text::NormalizeWhitespace(ex.target);
    ExactMatch& row = by_type[ex.error_type];
    row.error_type = ex.error_type;
    ++row.sentences;
    row.exact += exact;
    ++score.overall.sentences;
    score.overall.exact += exact;
    if (ex.error_type == kNoErrorType) {
      ++score.none_sentences;
      score.false_changes += out != ptb_text::NormalizeWhitespace(ex.source);
    }
  }
  for (auto& [type, row] : by_type) score.by_type.push_back(row);
  return score;
}

absl::StatusOr<double> AgreementRate(const std::vector<std::string>& a,
                                     const std::vector<std::string>& b) {
  if (a.size() != b.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("agreement of ", a.size(), " and ", b.size(), " outputs"));
  }
  if (a.empty()) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i)
    same += ptb_text::NormalizeWhitespace(a[i]) == ptb_text::NormalizeWhitespace(b[i]);
  return static_cast<double>(same) / a.size();
}

}  // namespace gecd::eval

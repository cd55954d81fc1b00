#include "model/prompt_template.h"

#include "absl/strings/str_cat.h"

namespace gecd::model {

absl::StatusOr<PromptTemplate> PromptTemplate::Parse(std::string_view pattern) {
  const size_t at = pattern.find(kPlaceholder);
  if (at == std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt template must contain ",
                                                   std::string(kPlaceholder), ": '",
                                                   std::string(pattern), "'"));
  }
  return PromptTemplate(std::string(pattern.substr(0, at)),
                        std::string(pattern.substr(at + kPlaceholder.size())));
}

std::string PromptTemplate::Apply(std::string_view text) const {
  std::string out;
  out.reserve(prefix_.size() + text.size() + suffix_.size());
  out.append(prefix_).append(text).append(suffix_);
  return out;
}

}  // namespace gecd::model

#include "peer_inputs.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "ptb_text/ptb_text.h"

namespace gecd::bench::cpu_peer {

absl::StatusOr<std::vector<std::string>> ReadJflegSources(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) texts.push_back(ptb_text::PtbDetokenize(line));
  if (texts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return texts;
}

std::vector<PeerPrompt> BuildPrompts(const text::PromptBuilder& builder,
                                     const std::vector<std::string>& texts) {
  std::vector<PeerPrompt> prompts(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    PeerPrompt& p = prompts[i];
    absl::StatusOr<text::CheckedText> checked = builder.Check(texts[i], 0);
    if (!checked.ok()) {
      p.error = std::string(checked.status().message());
      continue;
    }
    if (checked->unchanged) {
      p.ok = true;
      p.unchanged = true;
      continue;
    }
    absl::StatusOr<text::Prompt> prompt = builder.Build(*checked);
    if (!prompt.ok()) {
      p.error = std::string(prompt.status().message());
      continue;
    }
    p.ok = true;
    p.tokens = std::move(prompt->tokens);
    p.max_new_tokens = prompt->params.max_new_tokens;
    p.copy_bias = prompt->params.copy_bias;
    p.copy_begin = prompt->params.copy_begin;
    p.copy_end = prompt->params.copy_end;
  }
  return prompts;
}

}  // namespace gecd::bench::cpu_peer

// cpu_peer_tool: gecd's own tokenizer and request pipeline for bench/cpu_peer/run.sh, so that
// another engine (CTranslate2) runs exactly the token ids gecd runs and its output ids are
// decoded exactly as gecd decodes them.
//
//   cpu_peer_tool prompts [--config FILE] [--set KEY=VALUE]... --jfleg-src FILE [--texts-out F]
//       one JSON object per source line: {"tokens": [...], "max_new_tokens": N} as
//       text::PromptBuilder builds it (no spelling stage), {"unchanged": true} for a text of only
//       whitespace, or {"error": "..."} for a text the pipeline refuses. --texts-out writes the
//       detokenized sources, one a line (what `gecd eval --jfleg` sends, for gecd-load).
//   cpu_peer_tool decode [--config FILE] [--set KEY=VALUE]...
//       reads lines of space-separated token ids on stdin and writes each one's text as gecd
//       answers it (text::OutputText) as one JSON string per line.
//
// Single-threaded; errors go to stderr with exit code 1 (2 for a usage mistake).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "nlohmann/json.hpp"
#include "peer_inputs.h"
#include "text/output_text.h"
#include "text/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace {

using gecd::bench::cpu_peer::BuildPrompts;
using gecd::bench::cpu_peer::PeerPrompt;
using gecd::bench::cpu_peer::ReadJflegSources;

struct Flags {
  std::string mode;
  std::string config;
  std::vector<std::string> overrides;
  std::string jfleg_src;
  std::string texts_out;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "cpu_peer_tool: %s\nusage: cpu_peer_tool prompts [--config FILE] [--set K=V]... "
               "--jfleg-src FILE [--texts-out FILE]\n       cpu_peer_tool decode [--config FILE] "
               "[--set K=V]... "
               "< ids\n",
               why);
  return 2;
}

absl::Status RunPrompts(const gecd::config::Config& cfg, const gecd::model::Tokenizer& tokenizer,
                        const std::string& jfleg_src, const std::string& texts_out) {
  absl::StatusOr<std::vector<std::string>> texts = ReadJflegSources(jfleg_src);
  if (!texts.ok()) return texts.status();
  if (!texts_out.empty()) {
    std::ofstream out(texts_out, std::ios::trunc);
    for (const std::string& t : *texts) out << t << "\n";
    out.close();
    if (!out) return absl::PermissionDeniedError("cannot write --texts-out " + texts_out);
  }
  absl::StatusOr<gecd::text::PromptBuilder> builder =
      gecd::text::PromptBuilder::Create(cfg, tokenizer, nullptr);
  if (!builder.ok()) return builder.status();
  for (const PeerPrompt& p : BuildPrompts(*builder, *texts)) {
    nlohmann::json line;
    if (!p.ok) {
      line["error"] = p.error;
    } else if (p.unchanged) {
      line["unchanged"] = true;
    } else {
      line["tokens"] = p.tokens;
      line["max_new_tokens"] = p.max_new_tokens;
    }
    std::cout << line.dump() << "\n";
  }
  return absl::OkStatus();
}

absl::Status RunDecode(const gecd::model::Tokenizer& tokenizer) {
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::vector<int32_t> ids;
    for (long long id; in >> id;) {
      if (id < 0 || id >= tokenizer.vocab_size()) {
        return absl::InvalidArgumentError("token id " + std::to_string(id) +
                                          " outside the vocabulary");
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    if (!in.eof()) return absl::InvalidArgumentError("not a line of token ids: " + line);
    std::cout << nlohmann::json(gecd::text::OutputText(tokenizer, ids)).dump() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (argc < 2) return Usage("no mode");
  f.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage(("flag without a value: " + a).c_str());
    if (a == "--config") {
      f.config = argv[++i];
    } else if (a == "--set") {
      f.overrides.push_back(argv[++i]);
    } else if (a == "--jfleg-src") {
      f.jfleg_src = argv[++i];
    } else if (a == "--texts-out") {
      f.texts_out = argv[++i];
    } else {
      return Usage(("unknown flag " + a).c_str());
    }
  }
  if (f.mode != "prompts" && f.mode != "decode") return Usage("mode must be prompts or decode");
  if (f.mode == "prompts" && f.jfleg_src.empty()) return Usage("prompts needs --jfleg-src");
  absl::StatusOr<gecd::config::Config> cfg =
      gecd::config::LoadConfigWithOverrides(f.config, f.overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "cpu_peer_tool: %s\n", cfg.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<gecd::model::Tokenizer>> tokenizer =
      gecd::model::Tokenizer::LoadFromModelDir(cfg->model.dir);
  absl::Status status = tokenizer.status();
  if (status.ok()) {
    status = f.mode == "prompts" ? RunPrompts(*cfg, **tokenizer, f.jfleg_src, f.texts_out)
                                 : RunDecode(**tokenizer);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "cpu_peer_tool: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

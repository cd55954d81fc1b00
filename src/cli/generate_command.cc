#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/args.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "eval/engine_corrector.h"
#include "model/prompt_template.h"

namespace gecd::cli {
namespace {

struct GenerateRequest {
  config::Config config;
  std::vector<std::string> texts;
};

absl::StatusOr<GenerateRequest> ParseRequest(const Args& args) {
  GenerateRequest r;
  ASSIGN_OR_RETURN(r.config, LoadConfigFlags(args));
  config::Config& cfg = r.config;
  if (auto dir = args.Get("model")) cfg.model.dir = *dir;
  if (auto t = args.Get("prompt-template")) cfg.model.prompt_template = *t;
  RETURN_IF_ERROR(model::PromptTemplate::Parse(cfg.model.prompt_template).status());
  ASSIGN_OR_RETURN(cfg.model.max_output_tokens,
                   args.GetInt("max-new-tokens", cfg.model.max_output_tokens));
  ASSIGN_OR_RETURN(cfg.engine.threads, args.GetInt("threads", cfg.engine.threads));
  if (cfg.model.max_output_tokens < 1 || cfg.engine.threads < 0) {
    return absl::InvalidArgumentError("--max-new-tokens must be positive, --threads not negative");
  }
  r.texts = args.positionals();
  if (r.texts.empty()) return absl::InvalidArgumentError("no TEXT to correct");
  // One batch: every text runs at once.
  cfg.engine.max_batch_size = std::max<int>(cfg.engine.max_batch_size, r.texts.size());
  return r;
}

}  // namespace

int RunGenerate(const std::vector<std::string>& argv) {
  const CommandLine command = {
      .name = "generate",
      .flags =
          {
              {"model", true, "model directory (config.json, safetensors, tokenizer)"},
              {"config", true, "gecd YAML config: model.dir, prompt template, engine sizes"},
              {"set", true, "override a config key, e.g. --set engine.kv_cache_mb=64 (repeatable)"},
              {"prompt-template", true,
               "prompt with {text} for each TEXT (default: config's, or {text})"},
              {"max-new-tokens", true,
               "tokens to generate at most (default: model.max_output_tokens)"},
              {"threads", true, "BLAS threads (default: config's; 0 = all cores)"},
          },
      .usage =
          "usage: gecd generate [--model DIR] [--config FILE] [--set KEY=VALUE]...\n"
          "                     [--prompt-template T] [--max-new-tokens N] [--threads N] TEXT...\n"
          "Runs every TEXT through the model in one batch on engine.backend (greedy decoding,\n"
          "through the server's request pipeline: input checks, spelling stage, template, copy\n"
          "bias) and prints one output per line; newlines inside an output are printed as \\n.\n"
          "A TEXT the pipeline refuses prints an empty line, its reason goes to stderr, and the\n"
          "exit code is 1. Special tokens such as BOS are not added: write them into the\n"
          "template if the model expects them; a TEXT never produces one.\n",
      .usage_on_error = true,
      .error_with_code = true,
  };
  int exit_code = 0;
  const std::optional<GenerateRequest> request =
      ParseCommandLine(command, argv, ParseRequest, &exit_code);
  if (!request.has_value()) return exit_code;
  absl::StatusOr<std::unique_ptr<eval::EngineCorrector>> corrector =
      eval::EngineCorrector::Create(request->config);
  absl::StatusOr<eval::CorrectionRun> run =
      corrector.ok() ? (*corrector)->CorrectAll(request->texts, nullptr) : corrector.status();
  if (!run.ok()) {
    std::fprintf(stderr, "gecd generate: %s\n", run.status().ToString().c_str());
    return 1;
  }
  for (size_t i = 0; i < run->outputs.size(); ++i) {
    if (!run->errors[i].empty()) {
      std::fprintf(stderr, "gecd generate: TEXT %zu: %s\n", i + 1, run->errors[i].c_str());
    }
    std::printf("%s\n", absl::StrReplaceAll(run->outputs[i], {{"\n", "\\n"}}).c_str());
  }
  return run->failed == 0 ? 0 : 1;
}

}  // namespace gecd::cli

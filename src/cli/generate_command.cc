#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/status_macros.h"
#include "config/engine_options.h"
#include "config/config.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/prompt_template.h"
#include "model/tokenizer.h"

namespace gecd::cli {
namespace {

struct GenerateRequest {
  std::string model_dir;
  std::string prompt_template = "{text}";
  int max_new_tokens = 0;
  double copy_bias = 0;
  config::SpellingSection spelling;
  engine::CpuBackendOptions backend;
  std::vector<std::string> texts;
};

absl::StatusOr<GenerateRequest> ParseRequest(const Args& args) {
  ASSIGN_OR_RETURN(const config::Config cfg,
                   LoadConfigWithOverrides(args.Get("config").value_or(""), args.GetAll("set")));
  GenerateRequest r;
  r.model_dir = cfg.model.dir;
  r.prompt_template = cfg.model.prompt_template;
  r.max_new_tokens = cfg.model.max_output_tokens;
  r.copy_bias = cfg.model.copy_bias;
  r.spelling = cfg.spelling;
  r.backend = config::CpuBackendOptionsFrom(cfg.engine);
  if (auto dir = args.Get("model")) r.model_dir = *dir;
  if (auto t = args.Get("prompt-template")) r.prompt_template = *t;
  RETURN_IF_ERROR(model::PromptTemplate::Parse(r.prompt_template).status());
  ASSIGN_OR_RETURN(r.max_new_tokens, args.GetInt("max-new-tokens", r.max_new_tokens));
  ASSIGN_OR_RETURN(r.backend.threads, args.GetInt("threads", r.backend.threads));
  if (r.max_new_tokens < 1 || r.backend.threads < 0) {
    return absl::InvalidArgumentError("--max-new-tokens must be positive, --threads not negative");
  }
  r.texts = args.positionals();
  if (r.texts.empty()) return absl::InvalidArgumentError("no TEXT to correct");
  return r;
}

// Runs every text as one batch; returns the outputs in input order.
absl::StatusOr<std::vector<std::string>> Generate(GenerateRequest r) {
  // The checkpoint first: its errors say best what is wrong with a model directory.
  ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                   model::Checkpoint::Open(r.model_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tokenizer,
                   model::Tokenizer::LoadFromModelDir(r.model_dir));
  r.backend.max_batch_size = std::max<int>(r.backend.max_batch_size, r.texts.size());
  ASSIGN_OR_RETURN(std::unique_ptr<engine::CpuBackend> backend,
                   engine::CpuBackend::Create(*checkpoint, r.backend));
  engine::EngineOptions options = config::EngineOptionsFrom(*checkpoint);
  checkpoint.reset();  // the backend holds its own copy of the weights
  engine::Engine engine(backend.get(), tokenizer.get(), std::move(options));

  ASSIGN_OR_RETURN(const model::PromptTemplate prompt_template,
                   model::PromptTemplate::Parse(r.prompt_template));
  ASSIGN_OR_RETURN(const config::CopyBiasSetting copy_bias,
                   config::CopyBiasSetting::Create(r.copy_bias, prompt_template, *tokenizer));
  ASSIGN_OR_RETURN(const std::unique_ptr<model::SpellCorrector> spelling,
                   config::SpellCorrectorFrom(r.spelling));
  for (size_t i = 0; i < r.texts.size(); ++i) {
    const std::string prompt = config::PromptText(prompt_template, spelling.get(), r.texts[i]);
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(prompt));
    engine::GenerationParams params;
    params.max_new_tokens = r.max_new_tokens;
    copy_bias.Apply(ids, &params);
    RETURN_IF_ERROR(engine.AddSequence(i, std::move(ids), params));
  }
  std::vector<std::vector<int32_t>> generated(r.texts.size());
  while (engine.HasWork()) {
    ASSIGN_OR_RETURN(std::vector<engine::StepEvent> events, engine.Step());
    for (const engine::StepEvent& e : events) {
      // A stop token ends the output without being part of it.
      if (e.reason != engine::FinishReason::kStopToken) generated[e.id].push_back(e.token);
    }
  }
  std::vector<std::string> outputs;
  for (const auto& ids : generated) outputs.push_back(tokenizer->Decode(ids));
  return outputs;
}

}  // namespace

int RunGenerate(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> specs = {
      {"model", true, "model directory (config.json, safetensors, tokenizer)"},
      {"config", true, "gecd YAML config: model.dir, prompt template, engine sizes"},
      {"set", true, "override a config key, e.g. --set engine.kv_cache_mb=64 (repeatable)"},
      {"prompt-template", true, "prompt with {text} for each TEXT (default: config's, or {text})"},
      {"max-new-tokens", true, "tokens to generate at most (default: model.max_output_tokens)"},
      {"threads", true, "BLAS threads (default: config's; 0 = all cores)"},
      {"help", false, "show this help"},
  };
  const char* usage =
      "usage: gecd generate [--model DIR] [--config FILE] [--set KEY=VALUE]...\n"
      "                     [--prompt-template T] [--max-new-tokens N] [--threads N] TEXT...\n"
      "Runs every TEXT through the model in one batch on the CPU (greedy decoding, with the\n"
      "config's spelling stage and copy bias, as the server) and prints one output per line;\n"
      "newlines inside an output are printed as \\n. Special tokens such as BOS are not added:\n"
      "write them into the template if the model expects them.\n";
  auto args = Args::Parse(argv, specs);
  if (args.ok() && args->Has("help")) {
    std::printf("%s%s", usage, FlagHelp(specs).c_str());
    return 0;
  }
  absl::StatusOr<GenerateRequest> request = args.ok() ? ParseRequest(*args) : args.status();
  if (!request.ok()) {
    std::fprintf(stderr, "gecd generate: %s\n%s%s", request.status().ToString().c_str(), usage,
                 FlagHelp(specs).c_str());
    return 2;
  }
  auto outputs = Generate(*std::move(request));
  if (!outputs.ok()) {
    std::fprintf(stderr, "gecd generate: %s\n", outputs.status().ToString().c_str());
    return 1;
  }
  for (const std::string& out : *outputs) {
    std::printf("%s\n", absl::StrReplaceAll(out, {{"\n", "\\n"}}).c_str());
  }
  return 0;
}

}  // namespace gecd::cli

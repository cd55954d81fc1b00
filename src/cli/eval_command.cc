// gecd eval: the quality gate. Runs a model (in-process, or a running server over gRPC) on
// JFLEG and/or the synthetic test set, scores it (GLEU against the copy-the-source baseline,
// exact match per error type), measures throughput, and optionally compares a second model
// directory (e.g. its FP8 copy) output for output.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/args.h"
#include "common/progress_bar.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "eval/corrector.h"
#include "eval/engine_corrector.h"
#include "eval/eval_report.h"
#include "eval/jfleg.h"
#include "eval/synthetic.h"
#include "gecd/version.h"
#include "nlohmann/json.hpp"
#include "ptb_text/ptb_text.h"
#ifdef GECD_HAVE_SERVER
#include "eval_grpc/grpc_corrector.h"
#endif

namespace gecd::cli {
namespace {

using Json = nlohmann::ordered_json;

struct EvalOptions {
  config::Config config;
  std::string server;       // HOST:PORT; "" runs config.model.dir in-process
  std::string compare_dir;  // a second model directory, in-process
  // The second system's config: `config` with --compare-set's overrides on top (same model
  // unless --compare names another), e.g. speculative decoding off against on.
  config::Config compare_config;
  std::string jfleg_dir;
  std::string jfleg_split = "dev";
  std::string synthetic_path;
  int limit = 0;
  int in_flight = 64;
  // With --server: sentences sent N at a time as one whole text (the server splits it).
  int paragraphs = 1;
  int iterations = 500;
  std::string report_path;
  bool report_outputs = false;
  // The gate: exit 3 when the model misses either (NaN: not checked).
  double min_gleu_delta = std::numeric_limits<double>::quiet_NaN();
  double max_false_change_rate = std::numeric_limits<double>::quiet_NaN();
};

// The checks --min-gleu-delta and --max-false-change-rate ask for, and how the model did.
struct GateResult {
  std::vector<std::string> failures;
};

absl::StatusOr<double> GetDouble(const Args& args, std::string_view name) {
  double value = std::numeric_limits<double>::quiet_NaN();
  if (auto v = args.Get(name); v && !absl::SimpleAtod(*v, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", std::string(name), " wants a number, got '", *v, "'"));
  }
  return value;
}

absl::StatusOr<EvalOptions> ParseOptions(const Args& args) {
  EvalOptions o;
  ASSIGN_OR_RETURN(o.config, LoadConfigFlags(args));
  if (auto dir = args.Get("model")) o.config.model.dir = *dir;
  o.server = args.Get("server").value_or("");
  o.compare_dir = args.Get("compare").value_or("");
  o.compare_config = o.config;
  if (const std::vector<std::string> sets = args.GetAll("compare-set"); !sets.empty()) {
    std::vector<std::string> overrides = args.GetAll("set");
    overrides.insert(overrides.end(), sets.begin(), sets.end());
    ASSIGN_OR_RETURN(o.compare_config,
                     config::LoadConfigWithOverrides(args.Get("config").value_or(""), overrides));
    if (auto dir = args.Get("model")) o.compare_config.model.dir = *dir;
    if (o.compare_dir.empty()) o.compare_dir = o.compare_config.model.dir;
  }
  o.jfleg_dir = args.Get("jfleg").value_or("");
  o.jfleg_split = args.Get("jfleg-split").value_or("dev");
  o.synthetic_path = args.Get("synthetic").value_or("");
  o.report_path = args.Get("report").value_or("");
  o.report_outputs = args.Has("report-outputs");
  ASSIGN_OR_RETURN(o.limit, args.GetInt("limit", 0));
  ASSIGN_OR_RETURN(o.in_flight, args.GetInt("in-flight", o.in_flight));
  ASSIGN_OR_RETURN(o.paragraphs, args.GetInt("paragraphs", o.paragraphs));
  if (o.paragraphs < 1) return absl::InvalidArgumentError("--paragraphs must be positive");
  if (o.paragraphs > 1 && o.server.empty()) {
    return absl::InvalidArgumentError("--paragraphs needs --server (the server splits texts)");
  }
  ASSIGN_OR_RETURN(o.iterations, args.GetInt("gleu-iterations", o.iterations));
  ASSIGN_OR_RETURN(o.min_gleu_delta, GetDouble(args, "min-gleu-delta"));
  ASSIGN_OR_RETURN(o.max_false_change_rate, GetDouble(args, "max-false-change-rate"));
  if (!std::isnan(o.min_gleu_delta) && args.Get("jfleg") == std::nullopt) {
    return absl::InvalidArgumentError("--min-gleu-delta needs --jfleg");
  }
  if (!std::isnan(o.max_false_change_rate) && args.Get("synthetic") == std::nullopt) {
    return absl::InvalidArgumentError("--max-false-change-rate needs --synthetic");
  }
  if (args.Has("model") && !o.server.empty()) {
    return absl::InvalidArgumentError("--model and --server exclude each other");
  }
  if (o.jfleg_dir.empty() && o.synthetic_path.empty()) {
    return absl::InvalidArgumentError(
        "nothing to evaluate: give --jfleg DIR and/or --synthetic FILE");
  }
  if (o.limit < 0 || o.in_flight < 1 || o.iterations < 1) {
    return absl::InvalidArgumentError(
        "--limit must not be negative, --in-flight and --gleu-iterations must be positive");
  }
  RETURN_IF_ERROR(args.NoPositionals());
#ifndef GECD_HAVE_SERVER
  if (!o.server.empty()) return absl::InvalidArgumentError("--server needs a build with gRPC");
#endif
  return o;
}

absl::StatusOr<std::unique_ptr<eval::Corrector>> MakeCorrector(const EvalOptions& o,
                                                               const config::Config& config,
                                                               const std::string& server,
                                                               const std::string& model_dir) {
#ifdef GECD_HAVE_SERVER
  if (!server.empty()) {
    eval::GrpcCorrectorOptions options;
    options.target = server;
    options.in_flight = o.in_flight;
    ASSIGN_OR_RETURN(std::unique_ptr<eval::GrpcCorrector> c, eval::GrpcCorrector::Connect(options));
    return std::unique_ptr<eval::Corrector>(std::move(c));
  }
#endif
  config::Config cfg = config;
  cfg.model.dir = model_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<eval::EngineCorrector> c, eval::EngineCorrector::Create(cfg));
  return std::unique_ptr<eval::Corrector>(std::move(c));
}

// Sentences joined by a line break, as lines of an editor's text: the server never changes the
// whitespace between sentences, so the line breaks come back in place wherever it splits at
// them (it does not where a line without a sentence end goes on in lowercase: hard-wrapped
// prose), and the outputs are cut there again.
constexpr char kParagraphJoin = '\n';

// `texts` corrected `per_text` at a time as one whole text each (--paragraphs). A paragraph
// whose answer does not come back with its line breaks in place (the server joined two lines
// into one sentence, which the model then saw with the break) fails for its sentences, counted
// in `joined`.
absl::StatusOr<eval::CorrectionRun> CorrectAsParagraphs(eval::Corrector& corrector,
                                                        const std::vector<std::string>& texts,
                                                        size_t per_text, ProgressBar* progress,
                                                        int64_t* joined) {
  std::vector<std::string> paragraphs;
  for (size_t i = 0; i < texts.size(); i += per_text) {
    const size_t end = std::min(texts.size(), i + per_text);
    paragraphs.push_back(absl::StrJoin(texts.begin() + static_cast<std::ptrdiff_t>(i),
                                       texts.begin() + static_cast<std::ptrdiff_t>(end),
                                       std::string(1, kParagraphJoin)));
  }
  ASSIGN_OR_RETURN(eval::CorrectionRun whole, corrector.CorrectAll(paragraphs, progress));
  eval::CorrectionRun run;
  run.generated_tokens = whole.generated_tokens;
  run.wall_s = whole.wall_s;
  run.engine_wall_s = whole.engine_wall_s;
  for (size_t p = 0; p < paragraphs.size(); ++p) {
    const size_t n = std::min(per_text, texts.size() - p * per_text);
    std::vector<std::string> lines = absl::StrSplit(whole.outputs[p], kParagraphJoin);
    std::string error = whole.errors[p];
    if (error.empty() && lines.size() != n) {
      error = absl::StrCat("the paragraph came back with ", lines.size() - 1, " of its ", n - 1,
                           " line breaks");
      *joined += static_cast<int64_t>(n);
    }
    for (size_t k = 0; k < n; ++k) {
      run.outputs.push_back(error.empty() ? lines[k] : "");
      run.errors.push_back(error);
      run.failed += error.empty() ? 0 : 1;
    }
  }
  return run;
}

// `describe(i)` names sentence i in messages (its file and line).
absl::StatusOr<eval::System> RunSystem(const EvalOptions& o, const config::Config& config,
                                       const std::string& name, const std::string& server,
                                       const std::string& model_dir,
                                       const std::vector<std::string>& texts,
                                       const std::function<std::string(size_t)>& describe) {
  eval::System s;
  s.name = name;
  s.where = server.empty() ? absl::StrCat("model ", model_dir) : absl::StrCat("server ", server);
  std::fprintf(stderr, "gecd eval: %s: %s, %zu sentences\n", name.c_str(), s.where.c_str(),
               texts.size());
  ASSIGN_OR_RETURN(std::unique_ptr<eval::Corrector> corrector,
                   MakeCorrector(o, config, server, model_dir));
  if (const std::string what = corrector->Describe(); !what.empty()) {
    std::fprintf(stderr, "gecd eval: %s: engine backend: %s\n", name.c_str(), what.c_str());
  }
  if (o.paragraphs > 1 && !server.empty()) {
    ProgressBar bar(absl::StrCat("eval ", name, " (paragraphs)"),
                    (texts.size() + o.paragraphs - 1) / o.paragraphs);
    int64_t joined = 0;
    ASSIGN_OR_RETURN(s.run, CorrectAsParagraphs(*corrector, texts,
                                                static_cast<size_t>(o.paragraphs), &bar, &joined));
    std::fprintf(stderr,
                 "gecd eval: %s: %zu sentences sent %d to a text; %lld in paragraphs the server "
                 "split across a line\n",
                 name.c_str(), texts.size(), o.paragraphs, static_cast<long long>(joined));
  } else {
    ProgressBar bar(absl::StrCat("eval ", name), texts.size());
    ASSIGN_OR_RETURN(s.run, corrector->CorrectAll(texts, &bar));
  }
  if (s.run.failed > 0) {
    int shown = 0;
    for (size_t i = 0; i < s.run.errors.size() && shown < 5; ++i) {
      if (s.run.errors[i].empty()) continue;
      std::fprintf(stderr, "gecd eval: %s: %s failed: %s\n", name.c_str(), describe(i).c_str(),
                   s.run.errors[i].c_str());
      ++shown;
    }
    std::fprintf(stderr, "gecd eval: %s: %lld of %zu sentences failed (scored as empty outputs)\n",
                 name.c_str(), static_cast<long long>(s.run.failed), texts.size());
  }
  if (s.run.failed == static_cast<int64_t>(texts.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": every sentence failed; ", describe(0), ": ", s.run.errors[0]));
  }
  return s;
}

absl::StatusOr<GateResult> RunEval(const EvalOptions& o) {
  GateResult gate;
  // Inputs first, so that a bad file fails before a model loads.
  std::optional<eval::JflegSet> jfleg;
  if (!o.jfleg_dir.empty()) {
    ASSIGN_OR_RETURN(jfleg, eval::LoadJfleg(o.jfleg_dir, o.jfleg_split, o.limit));
  }
  std::vector<eval::SyntheticExample> synthetic;
  if (!o.synthetic_path.empty()) {
    ASSIGN_OR_RETURN(synthetic, eval::LoadSyntheticFile(o.synthetic_path, o.limit));
  }
  // JFLEG goes to the model as natural text; one run covers both sets.
  std::vector<std::string> texts;
  const size_t num_jfleg = jfleg ? jfleg->sources.size() : 0;
  if (jfleg) {
    for (const std::string& s : jfleg->sources) texts.push_back(ptb_text::PtbDetokenize(s));
  }
  for (const auto& ex : synthetic) texts.push_back(ex.source);

  const auto describe = [&](size_t i) {
    if (i < num_jfleg) return absl::StrCat(o.jfleg_dir, "/", o.jfleg_split, ".src line ", i + 1);
    return absl::StrCat(o.synthetic_path, " line ", synthetic[i - num_jfleg].line);
  };
  std::vector<eval::System> systems;
  ASSIGN_OR_RETURN(eval::System model,
                   RunSystem(o, o.config, "model", o.server, o.config.model.dir, texts, describe));
  systems.push_back(std::move(model));
  if (!o.compare_dir.empty()) {
    ASSIGN_OR_RETURN(eval::System compare,
                     RunSystem(o, o.compare_config, "compare", "", o.compare_dir, texts, describe));
    systems.push_back(std::move(compare));
  }

  Json report;
  report["gecd_version"] = GECD_VERSION_STRING;
  // The template, limits, copy bias and spelling stage are this command's config: the server's
  // own apply with --server (the compare run is in-process either way).
  report["settings"] = {{"mode", o.server.empty() ? "in-process" : "server"},
                        {"config", o.config.path},
                        {"prompt_template", o.config.model.prompt_template},
                        {"max_input_tokens", o.config.model.max_input_tokens},
                        {"max_output_tokens", o.config.model.max_output_tokens},
                        {"copy_bias", o.config.model.copy_bias},
                        {"speculate_tokens", o.config.engine.speculate_tokens},
                        {"spelling",
                         {{"dictionary", o.config.spelling.dictionary},
                          {"lexicon", o.config.spelling.lexicon},
                          {"min_count", o.config.spelling.min_count}}},
                        {"limit", o.limit}};
  eval::EvalSets sets;
  sets.jfleg = jfleg ? &*jfleg : nullptr;
  sets.synthetic = &synthetic;
  sets.synthetic_path = o.synthetic_path;
  sets.texts = std::move(texts);
  eval::ReportOptions report_options;
  report_options.gleu_iterations = o.iterations;
  report_options.include_outputs = o.report_outputs;
  report_options.min_gleu_delta = o.min_gleu_delta;
  report_options.max_false_change_rate = o.max_false_change_rate;
  ASSIGN_OR_RETURN(eval::Report scored, eval::ScoreSystems(sets, systems, report_options, &report));
  gate.failures = std::move(scored.gate_failures);
  std::fputs(scored.summary.c_str(), stdout);
  std::fflush(stdout);

  if (!o.report_path.empty()) {
    std::ofstream out(o.report_path, std::ios::trunc);
    out << report.dump(2) << "\n";
    out.close();
    if (!out)
      return absl::PermissionDeniedError(absl::StrCat("cannot write --report ", o.report_path));
    std::fprintf(stderr, "gecd eval: report written to %s\n", o.report_path.c_str());
  }
  return gate;
}

}  // namespace

int RunEval(const std::vector<std::string>& argv) {
  const CommandLine command = {
      .name = "eval",
      .flags =
          {
              {"model", true,
               "model directory to run in-process (default: the config's model.dir)"},
              {"server", true, "HOST:PORT of a running gecd serve to evaluate instead (gRPC)"},
              {"config", true,
               "gecd YAML config: model.dir, prompt template, token limits, engine"},
              {"set", true,
               "override a config key, e.g. --set engine.max_batch_size=256 (repeatable)"},
              {"jfleg", true,
               "JFLEG directory (<split>.src, <split>.ref0..3): GLEU vs the source copy"},
              {"jfleg-split", true, "JFLEG split to read (default: dev)"},
              {"synthetic", true, "TSV of error_type<TAB>source<TAB>target: exact match per type"},
              {"compare", true,
               "a second model directory (e.g. gecd quantize's FP8 copy), in-process"},
              {"compare-set", true,
               "compare a second run with this config override on top (repeatable), e.g. "
               "--compare-set engine.speculate_tokens=0; the same model unless --compare"},
              {"limit", true, "only the first N sentences of each set"},
              {"report", true, "write every figure as JSON to FILE"},
              {"report-outputs", false, "include every output in the JSON report"},
              {"in-flight", true, "requests outstanding at once with --server (default 64)"},
              {"paragraphs", true,
               "with --server: send N sentences at a time as one whole text (one a line; "
               "the server splits it), to compare with N=1 (default 1)"},
              {"gleu-iterations", true, "reference draws GLEU averages over (default 500)"},
              {"min-gleu-delta", true,
               "gate: exit 3 unless the model's JFLEG GLEU minus the source copy's is at least "
               "this"},
              {"max-false-change-rate", true,
               "gate: exit 3 if more than this share (0-1) of 'none' sentences change"},
          },
      .usage =
          "usage: gecd eval [--model DIR | --server HOST:PORT] [--config FILE] [--set "
          "KEY=VALUE]...\n"
          "                 [--jfleg DIR] [--synthetic FILE] [--compare DIR]\n"
          "                 [--compare-set KEY=VALUE]... [--limit N]\n"
          "                 [--report FILE [--report-outputs]] [--min-gleu-delta D]\n"
          "                 [--max-false-change-rate R]\n"
          "Runs every sentence through the model (greedy with the config's copy bias, prompt\n"
          "template and limits) and prints GLEU on JFLEG next to the copy-the-source baseline, "
          "exact\n"
          "match per error type on the synthetic set, and throughput. --compare runs a second "
          "model\n"
          "directory on the same sentences and reports the differences and how often the two "
          "agree;\n"
          "--compare-set the same model with other settings (the count of differing outputs).\n"
          "Exit status: 0, 1 on errors, 2 on usage errors, 3 when a --min-gleu-delta /\n"
          "--max-false-change-rate gate fails.\n",
      .usage_on_error = true,
  };
  int exit_code = 0;
  const std::optional<EvalOptions> options =
      ParseCommandLine(command, argv, ParseOptions, &exit_code);
  if (!options.has_value()) return exit_code;
  absl::StatusOr<GateResult> gate = RunEval(*options);
  if (!gate.ok()) {
    std::fprintf(stderr, "gecd eval: %s\n", std::string(gate.status().message()).c_str());
    return 1;
  }
  for (const std::string& failure : gate->failures) {
    std::fprintf(stderr, "gecd eval: gate failed: %s\n", failure.c_str());
  }
  return gate->failures.empty() ? 0 : 3;
}

}  // namespace gecd::cli

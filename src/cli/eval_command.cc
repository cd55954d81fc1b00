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
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/progress_bar.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "eval/corrector.h"
#include "eval/engine_corrector.h"
#include "eval/gleu.h"
#include "eval/jfleg.h"
#include "eval/ptb_text.h"
#include "eval/synthetic.h"
#include "gecd/version.h"
#include "nlohmann/json.hpp"
#ifdef GECD_HAVE_SERVER
#include "eval/grpc_corrector.h"
#endif

namespace gecd::cli {
namespace {

using Json = nlohmann::ordered_json;

struct EvalOptions {
  config::Config config;
  std::string server;        // HOST:PORT; "" runs config.model.dir in-process
  std::string compare_dir;   // a second model directory, in-process
  std::string jfleg_dir;
  std::string jfleg_split = "dev";
  std::string synthetic_path;
  int limit = 0;
  int in_flight = 64;
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
    return absl::InvalidArgumentError(absl::StrCat("--", std::string(name), " wants a number, got '", *v, "'"));
  }
  return value;
}

// One configuration under test and what it produced.
struct System {
  std::string name;   // "model" or "compare"
  std::string where;  // "model DIR" or "server HOST:PORT"
  eval::CorrectionRun run;
};

absl::StatusOr<EvalOptions> ParseOptions(const Args& args) {
  EvalOptions o;
  ASSIGN_OR_RETURN(o.config,
                   LoadConfigWithOverrides(args.Get("config").value_or(""), args.GetAll("set")));
  if (auto dir = args.Get("model")) o.config.model.dir = *dir;
  o.server = args.Get("server").value_or("");
  o.compare_dir = args.Get("compare").value_or("");
  o.jfleg_dir = args.Get("jfleg").value_or("");
  o.jfleg_split = args.Get("jfleg-split").value_or("dev");
  o.synthetic_path = args.Get("synthetic").value_or("");
  o.report_path = args.Get("report").value_or("");
  o.report_outputs = args.Has("report-outputs");
  ASSIGN_OR_RETURN(o.limit, args.GetInt("limit", 0));
  ASSIGN_OR_RETURN(o.in_flight, args.GetInt("in-flight", o.in_flight));
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
    return absl::InvalidArgumentError("nothing to evaluate: give --jfleg DIR and/or --synthetic FILE");
  }
  if (o.limit < 0 || o.in_flight < 1 || o.iterations < 1) {
    return absl::InvalidArgumentError(
        "--limit must not be negative, --in-flight and --gleu-iterations must be positive");
  }
  if (!args.positionals().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args.positionals()[0], "'"));
  }
#ifndef GECD_HAVE_SERVER
  if (!o.server.empty()) return absl::InvalidArgumentError("--server needs a build with gRPC");
#endif
  return o;
}

absl::StatusOr<std::unique_ptr<eval::Corrector>> MakeCorrector(const EvalOptions& o,
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
  config::Config cfg = o.config;
  cfg.model.dir = model_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<eval::EngineCorrector> c, eval::EngineCorrector::Create(cfg));
  return std::unique_ptr<eval::Corrector>(std::move(c));
}

// `describe(i)` names sentence i in messages (its file and line).
absl::StatusOr<System> RunSystem(const EvalOptions& o, const std::string& name,
                                 const std::string& server, const std::string& model_dir,
                                 const std::vector<std::string>& texts,
                                 const std::function<std::string(size_t)>& describe) {
  System s;
  s.name = name;
  s.where = server.empty() ? absl::StrCat("model ", model_dir) : absl::StrCat("server ", server);
  std::fprintf(stderr, "gecd eval: %s: %s, %zu sentences\n", name.c_str(), s.where.c_str(),
               texts.size());
  ASSIGN_OR_RETURN(std::unique_ptr<eval::Corrector> corrector, MakeCorrector(o, server, model_dir));
  {
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
    return absl::FailedPreconditionError(absl::StrCat(name, ": every sentence failed; ",
                                                      describe(0), ": ", s.run.errors[0]));
  }
  return s;
}

std::vector<std::string> Slice(const std::vector<std::string>& v, size_t begin, size_t count) {
  return std::vector<std::string>(v.begin() + begin, v.begin() + begin + count);
}

Json ThroughputJson(const System& s, size_t sentences) {
  const double wall = s.run.wall_s > 0 ? s.run.wall_s : 1e-9;
  Json j;
  j["where"] = s.where;
  j["sentences"] = sentences;
  j["failed"] = s.run.failed;
  j["wall_s"] = s.run.wall_s;
  j["sentences_per_s"] = sentences / wall;
  j["generated_tokens"] = s.run.generated_tokens;
  j["generated_tokens_per_s"] = s.run.generated_tokens / wall;
  Json errors = Json::array();
  for (size_t i = 0; i < s.run.errors.size() && errors.size() < 20; ++i) {
    if (!s.run.errors[i].empty()) errors.push_back({{"index", i}, {"message", s.run.errors[i]}});
  }
  j["first_errors"] = std::move(errors);
  return j;
}

Json SyntheticJson(const eval::SyntheticScore& s) {
  Json j;
  j["overall"] = {{"sentences", s.overall.sentences},
                  {"exact", s.overall.exact},
                  {"accuracy", s.overall.accuracy()}};
  Json by_type = Json::object();
  for (const eval::ExactMatch& row : s.by_type) {
    by_type[row.error_type] = {
        {"sentences", row.sentences}, {"exact", row.exact}, {"accuracy", row.accuracy()}};
  }
  j["by_type"] = std::move(by_type);
  j["none_sentences"] = s.none_sentences;
  j["false_changes"] = s.false_changes;
  j["false_change_rate"] = s.false_change_rate();
  return j;
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
    for (const std::string& s : jfleg->sources) texts.push_back(eval::PtbDetokenize(s));
  }
  for (const auto& ex : synthetic) texts.push_back(ex.source);

  const auto describe = [&](size_t i) {
    if (i < num_jfleg) return absl::StrCat(o.jfleg_dir, "/", o.jfleg_split, ".src line ", i + 1);
    return absl::StrCat(o.synthetic_path, " line ", synthetic[i - num_jfleg].line);
  };
  std::vector<System> systems;
  ASSIGN_OR_RETURN(System model,
                   RunSystem(o, "model", o.server, o.config.model.dir, texts, describe));
  systems.push_back(std::move(model));
  if (!o.compare_dir.empty()) {
    ASSIGN_OR_RETURN(System compare, RunSystem(o, "compare", "", o.compare_dir, texts, describe));
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
                        {"spelling", {{"dictionary", o.config.spelling.dictionary},
                                      {"lexicon", o.config.spelling.lexicon},
                                      {"min_count", o.config.spelling.min_count}}},
                        {"limit", o.limit}};
  Json throughput;
  for (const System& s : systems) throughput[s.name] = ThroughputJson(s, texts.size());
  report["throughput"] = throughput;

  std::string summary;
  if (jfleg) {
    std::vector<eval::Tokens> sources;
    std::vector<eval::Tokens> roundtrip;
    for (const std::string& s : jfleg->sources) {
      sources.push_back(eval::SplitTokens(s));
      roundtrip.push_back(eval::SplitTokens(eval::PtbTokenize(eval::PtbDetokenize(s))));
    }
    std::vector<std::vector<eval::Tokens>> refs;
    for (const auto& set : jfleg->references) {
      auto& r = refs.emplace_back();
      for (const std::string& line : set) r.push_back(eval::SplitTokens(line));
    }
    ASSIGN_OR_RETURN(const eval::GleuCorpus corpus,
                     eval::GleuCorpus::Create(sources, std::move(refs), o.iterations));
    ASSIGN_OR_RETURN(const eval::GleuScore copy, corpus.Score(sources));
    ASSIGN_OR_RETURN(const eval::GleuScore copy_roundtrip, corpus.Score(roundtrip));
    Json j;
    j["dir"] = jfleg->dir;
    j["split"] = jfleg->split;
    j["sentences"] = num_jfleg;
    j["references"] = jfleg->references.size();
    j["gleu_iterations"] = o.iterations;
    j["source_copy_gleu"] = copy.mean * 100;
    j["source_roundtrip_gleu"] = copy_roundtrip.mean * 100;
    absl::StrAppendFormat(&summary,
                          "JFLEG %s: %zu sentences, %zu references; GLEU (0-100), mean of %d "
                          "reference draws\n  %-12s %6.2f  (%.2f once detokenized and tokenized "
                          "again, as outputs are)\n",
                          jfleg->split, num_jfleg, jfleg->references.size(), o.iterations,
                          "source copy", copy.mean * 100, copy_roundtrip.mean * 100);
    std::vector<std::vector<std::string>> outputs;
    for (const System& s : systems) {
      std::vector<std::string> out = Slice(s.run.outputs, 0, num_jfleg);
      std::vector<eval::Tokens> hyps;
      for (const std::string& h : out) hyps.push_back(eval::SplitTokens(eval::PtbTokenize(h)));
      ASSIGN_OR_RETURN(const eval::GleuScore g, corpus.Score(hyps));
      j[s.name] = {{"gleu", g.mean * 100},
                   {"gleu_stddev", g.stddev * 100},
                   {"delta_vs_source", (g.mean - copy.mean) * 100}};
      absl::StrAppendFormat(&summary, "  %-12s %6.2f  %+.2f vs source", s.name, g.mean * 100,
                            (g.mean - copy.mean) * 100);
      if (s.name == "model" && (g.mean - copy.mean) * 100 < o.min_gleu_delta) {
        gate.failures.push_back(absl::StrFormat("JFLEG GLEU %+.2f vs the source copy is below "
                                                "--min-gleu-delta %g",
                                                (g.mean - copy.mean) * 100, o.min_gleu_delta));
      }
      if (s.name == "compare") {
        const double model_gleu = j["model"]["gleu"].get<double>();
        ASSIGN_OR_RETURN(const double agree, eval::AgreementRate(outputs[0], out));
        j["compare_minus_model_gleu"] = g.mean * 100 - model_gleu;
        j["agreement"] = agree;
        absl::StrAppendFormat(&summary, ", %+.2f vs model; outputs agree on %.1f%%",
                              g.mean * 100 - model_gleu, agree * 100);
      }
      summary += "\n";
      outputs.push_back(std::move(out));
    }
    report["jfleg"] = std::move(j);
    if (o.report_outputs) {
      Json rows = Json::array();
      for (size_t i = 0; i < num_jfleg; ++i) {
        Json row = {{"source", jfleg->sources[i]}, {"input", texts[i]}};
        for (size_t k = 0; k < systems.size(); ++k) row[systems[k].name] = outputs[k][i];
        rows.push_back(std::move(row));
      }
      report["outputs"]["jfleg"] = std::move(rows);
    }
  }
  if (!synthetic.empty()) {
    Json j;
    j["file"] = o.synthetic_path;
    j["sentences"] = synthetic.size();
    std::vector<eval::SyntheticScore> scores;
    std::vector<std::vector<std::string>> outputs;
    for (const System& s : systems) {
      std::vector<std::string> out = Slice(s.run.outputs, num_jfleg, synthetic.size());
      ASSIGN_OR_RETURN(eval::SyntheticScore score, eval::ScoreSynthetic(synthetic, out));
      j[s.name] = SyntheticJson(score);
      if (s.name == "model" && score.none_sentences > 0 &&
          score.false_change_rate() > o.max_false_change_rate) {
        gate.failures.push_back(absl::StrFormat(
            "false-change rate %.4f on 'none' sentences is above --max-false-change-rate %g",
            score.false_change_rate(), o.max_false_change_rate));
      }
      scores.push_back(std::move(score));
      outputs.push_back(std::move(out));
    }
    absl::StrAppendFormat(&summary, "synthetic %s: %zu sentences; exact match\n  %-16s %6s",
                          o.synthetic_path, synthetic.size(), "error type", "n");
    for (const System& s : systems) absl::StrAppendFormat(&summary, " %8s", s.name);
    summary += "\n";
    const auto row = [&](const std::string& label, int64_t n, auto value_of) {
      absl::StrAppendFormat(&summary, "  %-16s %6d", label, n);
      for (const auto& score : scores) absl::StrAppendFormat(&summary, " %7.1f%%", value_of(score) * 100);
      summary += "\n";
    };
    for (size_t t = 0; t < scores[0].by_type.size(); ++t) {
      row(scores[0].by_type[t].error_type, scores[0].by_type[t].sentences,
          [t](const eval::SyntheticScore& s) { return s.by_type[t].accuracy(); });
    }
    row("overall", scores[0].overall.sentences,
        [](const eval::SyntheticScore& s) { return s.overall.accuracy(); });
    if (scores[0].none_sentences > 0) {
      row("false changes", scores[0].none_sentences,
          [](const eval::SyntheticScore& s) { return s.false_change_rate(); });
    }
    if (outputs.size() == 2) {
      ASSIGN_OR_RETURN(const double agree, eval::AgreementRate(outputs[0], outputs[1]));
      j["agreement"] = agree;
      absl::StrAppendFormat(&summary, "  outputs agree on %.1f%%\n", agree * 100);
    }
    report["synthetic"] = std::move(j);
    if (o.report_outputs) {
      Json rows = Json::array();
      for (size_t i = 0; i < synthetic.size(); ++i) {
        Json r = {{"error_type", synthetic[i].error_type},
                  {"source", synthetic[i].source},
                  {"target", synthetic[i].target}};
        for (size_t k = 0; k < systems.size(); ++k) r[systems[k].name] = outputs[k][i];
        rows.push_back(std::move(r));
      }
      report["outputs"]["synthetic"] = std::move(rows);
    }
  }
  summary += "throughput\n";
  for (const System& s : systems) {
    const double wall = s.run.wall_s > 0 ? s.run.wall_s : 1e-9;
    absl::StrAppendFormat(&summary,
                          "  %-12s %zu sentences in %.2f s: %.1f sentences/s, %.0f generated "
                          "tokens/s (%d failed; %s)\n",
                          s.name, texts.size(), s.run.wall_s, texts.size() / wall,
                          s.run.generated_tokens / wall, s.run.failed, s.where);
  }
  std::fputs(summary.c_str(), stdout);
  std::fflush(stdout);

  if (!std::isnan(o.min_gleu_delta) || !std::isnan(o.max_false_change_rate)) {
    Json g;
    g["passed"] = gate.failures.empty();
    g["failures"] = gate.failures;
    if (!std::isnan(o.min_gleu_delta)) g["min_gleu_delta"] = o.min_gleu_delta;
    if (!std::isnan(o.max_false_change_rate)) g["max_false_change_rate"] = o.max_false_change_rate;
    report["gate"] = std::move(g);
  }
  if (!o.report_path.empty()) {
    std::ofstream out(o.report_path, std::ios::trunc);
    out << report.dump(2) << "\n";
    out.close();
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write --report ", o.report_path));
    std::fprintf(stderr, "gecd eval: report written to %s\n", o.report_path.c_str());
  }
  return gate;
}

}  // namespace

int RunEval(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> specs = {
      {"model", true, "model directory to run in-process (default: the config's model.dir)"},
      {"server", true, "HOST:PORT of a running gecd serve to evaluate instead (gRPC)"},
      {"config", true, "gecd YAML config: model.dir, prompt template, token limits, engine"},
      {"set", true, "override a config key, e.g. --set engine.max_batch_size=256 (repeatable)"},
      {"jfleg", true, "JFLEG directory (<split>.src, <split>.ref0..3): GLEU vs the source copy"},
      {"jfleg-split", true, "JFLEG split to read (default: dev)"},
      {"synthetic", true, "TSV of error_type<TAB>source<TAB>target: exact match per type"},
      {"compare", true, "a second model directory (e.g. gecd quantize's FP8 copy), in-process"},
      {"limit", true, "only the first N sentences of each set"},
      {"report", true, "write every figure as JSON to FILE"},
      {"report-outputs", false, "include every output in the JSON report"},
      {"in-flight", true, "requests outstanding at once with --server (default 64)"},
      {"gleu-iterations", true, "reference draws GLEU averages over (default 500)"},
      {"min-gleu-delta", true, "gate: exit 3 unless the model's JFLEG GLEU minus the source copy's is at least this"},
      {"max-false-change-rate", true, "gate: exit 3 if more than this share (0-1) of 'none' sentences change"},
      {"help", false, "show this help"},
  };
  const char* usage =
      "usage: gecd eval [--model DIR | --server HOST:PORT] [--config FILE] [--set KEY=VALUE]...\n"
      "                 [--jfleg DIR] [--synthetic FILE] [--compare DIR] [--limit N]\n"
      "                 [--report FILE [--report-outputs]] [--min-gleu-delta D]\n"
      "                 [--max-false-change-rate R]\n"
      "Runs every sentence through the model (greedy with the config's copy bias, prompt\n"
      "template and limits) and prints GLEU on JFLEG next to the copy-the-source baseline, exact\n"
      "match per error type on the synthetic set, and throughput. --compare runs a second model\n"
      "directory on the same sentences and reports the differences and how often the two agree.\n"
      "Exit status: 0, 1 on errors, 2 on usage errors, 3 when a --min-gleu-delta /\n"
      "--max-false-change-rate gate fails.\n";
  auto args = Args::Parse(argv, specs);
  if (args.ok() && args->Has("help")) {
    std::printf("%s%s", usage, FlagHelp(specs).c_str());
    return 0;
  }
  absl::StatusOr<EvalOptions> options = args.ok() ? ParseOptions(*args) : args.status();
  if (!options.ok()) {
    std::fprintf(stderr, "gecd eval: %s\n%s%s", std::string(options.status().message()).c_str(),
                 usage, FlagHelp(specs).c_str());
    return 2;
  }
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

// gecd tune: measures which values of the settings that decide throughput let one daemon of
// this config sustain the highest request rate within a p99 SLO (loadgen/tuner.h's DaemonTuner:
// coordinate descent, gecd-load's find-max against daemons it starts itself), writes the config
// with those values, and prints the per-pod figures an autoscaler needs: the rate, the requests
// in flight at that rate, and the HPA AverageValue target for gecd_request_concurrency. This
// file parses the flags and reports; the search is the tuner's.
#ifdef GECD_HAVE_SERVER

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/args.h"
#include "common/mapped_file.h"
#include "common/progress_bar.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "config/config_edit.h"
#include "loadgen/load_options.h"
#include "loadgen/tuner.h"
#include "nlohmann/json.hpp"

namespace gecd::cli {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct TuneOptions {
  // The search: the daemons' config (config_path absolute; "" for the built-in defaults) and
  // --set overrides, the SLO, the budget, the trials.
  loadgen::DaemonTuneOptions search;
  config::Config config;  // as the daemons read it
  double headroom = 0.3;
  std::string out_path = "tuned.yaml";
  std::string json_path;
};

absl::StatusOr<double> DurationFlag(const Args& args, const std::string& name, double value,
                                    bool zero_allowed) {
  const std::optional<std::string> text = args.Get(name);
  if (!text) return value;
  absl::StatusOr<double> parsed = loadgen::ParseDuration(*text);
  if (!parsed.ok() || !(zero_allowed ? *parsed >= 0 : *parsed > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *text, "' is not a duration",
                                                   zero_allowed ? "" : " > 0",
                                                   " (30s, 500ms, 10m)"));
  }
  return *parsed;
}

// A number in [lo, hi) (hi_inclusive: [lo, hi]).
absl::StatusOr<double> FractionFlag(const Args& args, const std::string& name, double value,
                                    double lo, double hi, bool hi_inclusive) {
  const std::optional<std::string> text = args.Get(name);
  if (!text) return value;
  double v;
  if (!absl::SimpleAtod(*text, &v) || !(v >= lo) || !(hi_inclusive ? v <= hi : v < hi)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s: '%s' is not a number in [%g, %g%s", name, *text, lo, hi, hi_inclusive ? "]" : ")"));
  }
  return v;
}

// The config's values of the settings the search tunes.
loadgen::Settings InitialSettings(const config::Config& cfg) {
  loadgen::Settings initial = {
      {loadgen::kMaxBatchSizeKey, absl::StrCat(cfg.engine.max_batch_size)},
      {loadgen::kMaxStepTokensKey, absl::StrCat(cfg.engine.max_step_tokens)},
      {loadgen::kWorkersKey, absl::StrCat(cfg.server.workers)},
  };
  if (cfg.engine.backend == "cuda") {
    initial[loadgen::kGraphBatchSizesKey] = cfg.engine.graph_batch_sizes;
  }
  return initial;
}

absl::StatusOr<TuneOptions> ParseOptions(const Args& args) {
  if (!args.positionals().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tune takes no positional arguments, got '", args.positionals()[0], "'"));
  }
  TuneOptions o;
  ASSIGN_OR_RETURN(o.search.slo_p99_s, DurationFlag(args, "slo-p99", o.search.slo_p99_s, false));
  ASSIGN_OR_RETURN(o.search.budget_s, DurationFlag(args, "budget", o.search.budget_s, false));
  ASSIGN_OR_RETURN(o.search.trial_s, DurationFlag(args, "trial", o.search.trial_s, false));
  ASSIGN_OR_RETURN(o.search.warmup_s, DurationFlag(args, "warmup", o.search.warmup_s, true));
  ASSIGN_OR_RETURN(o.headroom, FractionFlag(args, "headroom", o.headroom, 0, 1, false));
  ASSIGN_OR_RETURN(o.search.max_error_rate,
                   FractionFlag(args, "max-error-rate", o.search.max_error_rate, 0, 1, true));
  for (const char* name : {"out", "json", "input", "config"}) {
    if (args.Has(name) && args.Get(name)->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a file name"));
    }
  }
  o.out_path = args.Get("out").value_or(o.out_path);
  o.json_path = args.Get("json").value_or("");
  o.search.input_path = args.Get("input").value_or("");
  // As for serve: the daemons it starts read the config again.
  ASSIGN_OR_RETURN(DaemonFlags flags, LoadDaemonFlags(args));
  o.search.config_path = std::move(flags.config_path);
  o.search.sets = std::move(flags.overrides);
  o.config = std::move(flags.config);
  o.search.initial = InitialSettings(o.config);
  o.search.backend = o.config.engine.backend;
  return o;
}

std::string Describe(const loadgen::Settings& settings) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : settings) parts.push_back(absl::StrCat(key, "=", value));
  return absl::StrJoin(parts, " ");
}

// The settings that differ from `initial`, or "(the config's)".
std::string Changes(const loadgen::Settings& settings, const loadgen::Settings& initial) {
  loadgen::Settings changed;
  for (const auto& [key, value] : settings) {
    if (initial.at(key) != value) changed[key] = value;
  }
  return changed.empty() ? "(the config's)" : Describe(changed);
}

// Integers as numbers, so that a reader of the JSON need not parse them.
Json SettingsJson(const loadgen::Settings& settings) {
  Json out = Json::object();
  for (const auto& [key, value] : settings) {
    int number;
    if (absl::SimpleAtoi(value, &number)) {
      out[key] = number;
    } else {
      out[key] = value;
    }
  }
  return out;
}

Json TrialJson(const loadgen::Trial& t) {
  Json j = {
      {"offered_qps", t.offered_qps},        {"achieved_qps", t.measured.achieved_qps},
      {"p99_ms", t.measured.p99_s * 1e3},    {"mean_latency_ms", t.measured.mean_latency_s * 1e3},
      {"error_rate", t.measured.error_rate}, {"passed", t.passed}};
  if (t.measured.server_concurrency >= 0) j["concurrency_gauge"] = t.measured.server_concurrency;
  return j;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// The input config with the tuned settings (and the --set overrides the daemons ran with),
// its relative paths rebased for the output's directory, under a comment saying what was
// measured; then read back as `gecd serve --config` reads it.
absl::Status WriteTunedConfig(const TuneOptions& o, const loadgen::Settings& settings,
                              const std::string& summary) {
  const fs::path out = fs::absolute(o.out_path);
  const std::string to_dir = out.parent_path().string();
  std::string text;
  if (!o.search.config_path.empty()) {
    ASSIGN_OR_RETURN(text, ReadFileToString(o.search.config_path));
    ASSIGN_OR_RETURN(
        text, config::MoveConfigText(text, fs::path(o.search.config_path).parent_path().string(),
                                     to_dir));
  }
  const auto rebased = [&](const std::string& path) {
    return config::RelocatePath(fs::absolute(path).string(), to_dir);
  };
  config::KeyValues values;
  bool model_dir_set = false;
  for (const std::string& kv : o.search.sets) {
    const size_t eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    std::string value = kv.substr(eq + 1);
    const std::vector<std::string>& path_keys = config::PathKeys();
    if (std::find(path_keys.begin(), path_keys.end(), key) != path_keys.end() && !value.empty() &&
        fs::path(value).is_relative()) {
      value = rebased(value);  // --set paths are relative to the working directory
    }
    model_dir_set = model_dir_set || key == "model.dir";
    values.emplace_back(std::move(key), std::move(value));
  }
  if (o.search.config_path.empty() && !model_dir_set) {
    values.emplace_back("model.dir", rebased(o.config.model.dir));  // the built-in default
  }
  for (const auto& [key, value] : settings) values.emplace_back(key, value);
  ASSIGN_OR_RETURN(text, config::SetConfigValues(text, values));
  RETURN_IF_ERROR(WriteStringToFile(out.string(), summary + text));
  if (absl::StatusOr<config::Config> check = config::LoadConfigFile(out.string()); !check.ok()) {
    return absl::InternalError(absl::StrCat("the tuned config ", out.string(),
                                            " does not load: ", check.status().message()));
  }
  return absl::OkStatus();
}

// What the search measured, a table on stdout.
void PrintCandidates(const loadgen::TuneResult& r, const loadgen::Settings& initial) {
  std::printf("%-3s %10s %9s %9s %6s %6s  %s\n", "#", "max req/s", "p99 ms", "in flight", "trials",
              "s", "settings (changed from the config's)");
  int n = 0;
  for (const loadgen::CandidateResult& c : r.candidates) {
    std::string p99 = "-";
    std::string in_flight = "-";
    if (c.best_trial.has_value()) {
      const loadgen::TrialMeasurement& m = c.best_trial->measured;
      p99 = absl::StrFormat("%.1f", m.p99_s * 1e3);
      in_flight =
          absl::StrFormat("%.1f", m.server_concurrency >= 0 ? m.server_concurrency
                                                            : m.achieved_qps * m.mean_latency_s);
    }
    std::string note;
    if (!c.status.ok()) {
      note = absl::StrCat("  failed: ", c.status.message());
    } else if (c.abandoned) {
      note = "  (failed at the best rate so far)";
    } else if (c.max_qps == 0 && !c.trials.empty()) {
      note = "  (no rate met the SLO)";
    }
    std::printf("%-3d %10.1f %9s %9s %6zu %6.1f  %s%s\n", ++n, c.max_qps, p99.c_str(),
                in_flight.c_str(), c.trials.size(), c.seconds, Changes(c.settings, initial).c_str(),
                note.c_str());
  }
  for (const loadgen::Settings& s : r.untried) {
    std::printf("%-3s %10s %9s %9s %6s %6s  %s  (not tried: the budget ran out)\n", "-", "-", "-",
                "-", "-", "-", Changes(s, initial).c_str());
  }
}

Json CandidatesJson(const loadgen::TuneResult& r) {
  Json candidates = Json::array();
  for (const loadgen::CandidateResult& c : r.candidates) {
    Json trials = Json::array();
    for (const loadgen::Trial& t : c.trials) trials.push_back(TrialJson(t));
    candidates.push_back({{"settings", SettingsJson(c.settings)},
                          {"max_qps", c.max_qps},
                          {"status", c.status.ok() ? "ok" : std::string(c.status.message())},
                          {"abandoned", c.abandoned},
                          {"seconds", c.seconds},
                          {"trials", trials}});
  }
  Json untried = Json::array();
  for (const loadgen::Settings& s : r.untried) untried.push_back(SettingsJson(s));
  return {{"candidates", candidates}, {"untried", untried}};
}

void PrintHeader(const TuneOptions& o, const loadgen::DaemonTuner& tuner) {
  std::printf(
      "gecd tune: %s, backend %s, SLO p99 <= %.0f ms with errors <= %.2f%%, budget %.0f s\n",
      o.search.config_path.empty() ? "built-in config" : o.search.config_path.c_str(),
      o.config.engine.backend.c_str(), o.search.slo_p99_s * 1e3, o.search.max_error_rate * 100,
      o.search.budget_s);
  std::vector<std::string> keys;
  for (const auto& [key, value] : tuner.options().initial) keys.push_back(key);
  std::printf("trials: %.1f s + %.1f s warm-up, deadline %d ms; searching %s\n", o.search.trial_s,
              o.search.warmup_s, tuner.deadline_ms(), absl::StrJoin(keys, ", ").c_str());
  std::fflush(stdout);
}

// The search, under a progress bar of the budget that names each candidate and trial.
absl::StatusOr<loadgen::TuneResult> SearchWithProgress(loadgen::DaemonTuner& tuner) {
  const loadgen::Settings& initial = tuner.options().initial;
  const auto t0 = std::chrono::steady_clock::now();
  const auto now_s = [t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  ProgressBar bar("tune (s of budget)", static_cast<size_t>(std::ceil(tuner.options().budget_s)));
  size_t drawn = 0;
  int candidate = 0;
  const auto progress = [&](const std::string& note) {
    const size_t elapsed = static_cast<size_t>(now_s());
    bar.Advance(elapsed > drawn ? elapsed - drawn : 0, note);
    drawn = std::max(drawn, elapsed);
  };
  loadgen::TuneCallbacks callbacks;
  callbacks.candidate_started = [&](const loadgen::Settings& s) {
    progress(absl::StrCat("#", ++candidate, " ", Changes(s, initial), ": starting"));
  };
  callbacks.trial_done = [&](const loadgen::Settings& s, const loadgen::Trial& t) {
    progress(absl::StrFormat("#%d %s: %.1f req/s p99 %.0f ms %s", candidate, Changes(s, initial),
                             t.offered_qps, t.measured.p99_s * 1e3, t.passed ? "pass" : "fail"));
  };
  absl::StatusOr<loadgen::TuneResult> result = tuner.Run(now_s, callbacks);
  progress("done");
  return result;
}

// A search that measured nothing: the exit code, or the error to report.
absl::StatusOr<int> SearchFailed(const TuneOptions& o, loadgen::DaemonTuner& tuner,
                                 const absl::Status& s) {
  const std::string logs_note = absl::StrCat(" (daemon logs: ", tuner.log_dir(), ")");
  if (absl::IsFailedPrecondition(s)) {
    std::fprintf(stderr, "gecd tune: the config's own settings do not start: %s%s\n",
                 std::string(s.message()).c_str(), logs_note.c_str());
    return 2;
  }
  if (absl::IsDeadlineExceeded(s)) {
    tuner.RemoveLogs();
    std::fprintf(stderr, "gecd tune: --budget %.0fs is too short: %s\n", o.search.budget_s,
                 std::string(s.message()).c_str());
    return 2;
  }
  return absl::Status(
      s.code(), absl::StrCat("measuring the config's own settings: ", s.message(), logs_note));
}

Json ResultJson(const TuneOptions& o, const loadgen::TuneResult& r, const loadgen::PodFigures& f) {
  Json json = {{"slo_met", r.slo_met},
               {"slo_p99_ms", o.search.slo_p99_s * 1e3},
               {"max_error_rate", o.search.max_error_rate},
               {"headroom", o.headroom},
               {"rps", f.rps},
               {"achieved_rps", f.achieved_rps},
               {"concurrency", f.concurrency},
               {"concurrency_gauge", f.gauge_concurrency >= 0 ? Json(f.gauge_concurrency) : Json()},
               {"concurrency_littles_law", f.littles_law_concurrency},
               {"p99_ms", f.p99_s * 1e3},
               {"mean_latency_ms", f.mean_latency_s * 1e3},
               {"hpa_target", f.hpa_target},
               {"settings", SettingsJson(r.best.settings)},
               {"config", o.search.config_path.empty() ? Json() : Json(o.search.config_path)},
               {"out", r.slo_met ? Json(fs::absolute(o.out_path).string()) : Json()},
               {"budget_s", o.search.budget_s},
               {"elapsed_s", r.elapsed_s}};
  json.update(CandidatesJson(r));
  return json;
}

void PrintClosestMiss(const TuneOptions& o, const loadgen::CandidateResult& best) {
  const loadgen::Trial& closest = *best.best_trial;
  const std::string p99 = closest.measured.achieved_qps > 0
                              ? absl::StrFormat("p99 %.1f ms", closest.measured.p99_s * 1e3)
                              : "no OK answer";
  std::printf(
      "\nno setting met the SLO (p99 <= %.0f ms, errors <= %.2f%%). The closest: %s at %.1f "
      "req/s: %s, errors %.2f%%. No tuned config written.\n",
      o.search.slo_p99_s * 1e3, o.search.max_error_rate * 100, Describe(best.settings).c_str(),
      closest.offered_qps, p99.c_str(), closest.measured.error_rate * 100);
}

// The comment at the top of the tuned config: what was measured, and what was tuned.
std::string TunedSummary(const TuneOptions& o, const loadgen::PodFigures& f,
                         const loadgen::Settings& settings) {
  std::string summary = absl::StrFormat(
      "# Tuned by `gecd tune` on %s from %s (backend %s).\n"
      "# Within p99 <= %.0f ms and errors <= %.2f%%, one daemon sustained %.1f requests/s\n"
      "# with %.2f in flight; HPA AverageValue target for gecd_request_concurrency: %.2f\n"
      "# (headroom %.2f). Tuned:\n",
      UtcNow(), o.search.config_path.empty() ? "the built-in defaults" : o.search.config_path,
      o.config.engine.backend, o.search.slo_p99_s * 1e3, o.search.max_error_rate * 100, f.rps,
      f.concurrency, f.hpa_target, o.headroom);
  for (const auto& [key, value] : settings) {
    absl::StrAppend(&summary, "#   ", key, "=", value, "\n");
  }
  return summary;
}

void PrintTuned(const TuneOptions& o, const loadgen::PodFigures& f,
                const loadgen::Settings& settings) {
  const std::string little = absl::StrFormat("Little's law %.2f", f.littles_law_concurrency);
  const std::string basis = f.gauge_concurrency >= 0
                                ? absl::StrCat("gecd_request_concurrency mean; ", little)
                                : "Little's law: achieved rate x mean latency";
  std::printf("\ntuned settings: %s\n", Describe(settings).c_str());
  std::printf("per pod, SLO p99 <= %.0f ms, errors <= %.2f%%:\n", o.search.slo_p99_s * 1e3,
              o.search.max_error_rate * 100);
  std::printf("  sustainable rate   %.1f req/s (achieved %.1f, p99 %.1f ms, mean %.1f ms)\n", f.rps,
              f.achieved_rps, f.p99_s * 1e3, f.mean_latency_s * 1e3);
  std::printf("  concurrency        %.2f in flight (%s)\n", f.concurrency, basis.c_str());
  std::printf("  HPA target         %.2f = %.2f x (1 - %.2f)  (averageValue: \"%lldm\")\n",
              f.hpa_target, f.concurrency, o.headroom,
              static_cast<long long>(std::llround(f.hpa_target * 1000)));
  std::printf("wrote %s\n", o.out_path.c_str());
}

// Runs the search (loadgen::DaemonTuner) and reports it; the exit code.
absl::StatusOr<int> Tune(const TuneOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<loadgen::DaemonTuner> tuner,
                   loadgen::DaemonTuner::Create(o.search));
  PrintHeader(o, *tuner);
  absl::StatusOr<loadgen::TuneResult> result = SearchWithProgress(*tuner);
  if (!result.ok()) return SearchFailed(o, *tuner, result.status());
  std::printf("\n");
  PrintCandidates(*result, tuner->options().initial);
  const loadgen::CandidateResult& best = result->best;
  const loadgen::PodFigures f = loadgen::PerPodFigures(best, o.headroom);
  Json json = ResultJson(o, *result, f);
  int exit_code = 0;
  if (!result->slo_met) {
    PrintClosestMiss(o, best);
    json["closest"] = TrialJson(*best.best_trial);
    exit_code = 1;
  } else {
    RETURN_IF_ERROR(WriteTunedConfig(o, best.settings, TunedSummary(o, f, best.settings)));
    PrintTuned(o, f, best.settings);
  }
  std::printf("searched %.0f s of the %.0f s budget: %zu candidates measured, %zu left untried\n",
              result->elapsed_s, o.search.budget_s, result->candidates.size(),
              result->untried.size());
  if (!o.json_path.empty()) {
    RETURN_IF_ERROR(WriteStringToFile(o.json_path, json.dump(2) + "\n"));
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  if (tuner->daemon_failed()) {
    std::printf("some daemons did not start; their logs are in %s\n", tuner->log_dir().c_str());
  } else {
    tuner->RemoveLogs();
  }
  return exit_code;
}

}  // namespace

int RunTune(const std::vector<std::string>& argv) {
  const CommandLine command = {
      .name = "tune",
      .flags =
          {
              {"config", true, "gecd YAML config to tune (default: built-in defaults)"},
              {"set", true, "override a config key for every daemon, e.g. --set engine.threads=2"},
              {"slo-p99", true, "latency SLO: p99 of OK answers at most this (default 1s)"},
              {"max-error-rate", true, "errors and refusals at most this share (default 0.01)"},
              {"budget", true,
               "wall time for the whole search, daemon starts included (default 10m)"},
              {"out", true, "the tuned config to write (default tuned.yaml)"},
              {"json", true, "write the figures and every trial as JSON to FILE"},
              {"headroom", true,
               "HPA target = concurrency x (1 - headroom), in [0, 1) (default 0.3)"},
              {"input", true, "sentences for the trials, one per line (default: built-in samples)"},
              {"trial", true, "measured time of each find-max trial (default 3s)"},
              {"warmup", true, "unmeasured time before each trial (default 1s)"},
          },
      .usage =
          "usage: gecd tune [--config FILE] [--set KEY=VALUE]... [--slo-p99 1s] [--budget 10m]\n"
          "                 [--out tuned.yaml] [--json FILE] [--headroom 0.3] [--input FILE]\n"
          "Starts daemons of the config (gecd serve on free 127.0.0.1 ports) with candidate "
          "values\n"
          "of engine.max_batch_size, engine.max_step_tokens, server.workers and, on the cuda\n"
          "backend, engine.graph_batch_sizes, finds each one's highest open-loop rate within the "
          "SLO\n"
          "(gecd-load's find-max), writes the config with the best values, and prints the per-pod\n"
          "rate, concurrency and HPA target. Exit status: 0; 1 when no setting met the SLO (the\n"
          "closest is reported) or on errors; 2 on bad flags, a bad config, or a config whose\n"
          "daemon does not start.\n\n",
  };
  int usage_exit_code = 0;
  const std::optional<TuneOptions> options =
      ParseCommandLine(command, argv, ParseOptions, &usage_exit_code);
  if (!options.has_value()) return usage_exit_code;
  absl::StatusOr<int> exit_code = Tune(*options);
  if (!exit_code.ok()) {
    std::fprintf(stderr, "gecd tune: %s\n", std::string(exit_code.status().message()).c_str());
    return absl::IsInvalidArgument(exit_code.status()) ? 2 : 1;
  }
  return *exit_code;
}

}  // namespace gecd::cli
#endif

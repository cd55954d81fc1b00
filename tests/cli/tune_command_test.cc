// Runs the real `gecd tune` binary: bad flags and configs exit 2 naming what is wrong, a config
// whose daemon cannot start names its key, a short search on the echo backend stays within its
// budget and writes a tuned config that loads and figures that agree, and an SLO no setting
// can meet exits 1 with the closest miss.
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/run_gecd.h"
#include "testing/test_paths.h"

namespace gecd {
namespace {

using ::gecd::testing::RunGecd;
using ::gecd::testing::RunResult;
using ::testing::HasSubstr;
using ::testing::Not;

// A config for the echo backend with the small test model, named by a path relative to the
// config's own directory, and a comment the tuned copy must keep.
std::string WriteEchoConfig(const std::string& dir, const std::string& extra = "") {
  const std::string model = gecd::testing::SmallModelDir();
  const std::string relative = std::filesystem::path(model).lexically_relative(dir).string();
  std::ofstream(dir + "/echo.yaml") << "# the operator's note\n"
                                    << "model:\n  dir: " << relative << "\n"
                                    << "engine:\n  backend: echo   # no model run\n"
                                    << "  max_batch_size: 64\n"
                                    << extra << "server:\n  workers: 1\n  slo_p99_ms: 3600000\n";
  return dir + "/echo.yaml";
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The number after `label` on its line of `output`.
double Figure(const std::string& output, const std::string& label) {
  std::smatch m;
  const std::regex re(label + R"(\s+([0-9.]+))");
  if (!std::regex_search(output, m, re)) {
    ADD_FAILURE() << "no '" << label << "' in:\n" << output;
    return -1;
  }
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(m[1].str(), &v));
  return v;
}

TEST(TuneCommandTest, BadFlagsAndConfigsExit2NamingThem) {
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/bad.yaml") << "engine:\n  max_batch_sise: 8\n";
  const struct {
    std::string args;
    std::string names;
  } cases[] = {
      {"--budget soon", "--budget: 'soon'"},
      {"--slo-p99 0", "--slo-p99"},
      {"--headroom 1", "--headroom: '1'"},
      {"--max-error-rate 2", "--max-error-rate"},
      {"--bogus", "unknown flag --bogus"},
      {"--out=", "--out needs a file name"},
      {"extra", "no positional arguments"},
      {"--config " + dir + "/bad.yaml", "bad.yaml:2: unknown key 'engine.max_batch_sise'"},
      {"--config " + dir + "/missing.yaml", "missing.yaml"},
      {"--set engine.max_batch_size=0", "engine.max_batch_size"},
      {"--set engine.max_step_tokens=8 --set engine.max_batch_size=16", "engine.max_step_tokens"},
      {"--set engine.backend=echo --input " + dir + "/none.txt", "--input"},
  };
  for (const auto& c : cases) {
    const RunResult r = RunGecd("tune " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.names)) << c.args;
  }
  const RunResult help = RunGecd("tune --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--slo-p99"));
}

TEST(TuneCommandTest, AConfigWhoseDaemonCannotStartIsAnErrorNamingTheKey) {
  // The daemon's log is kept for the operator, in $TMPDIR: this test's own.
  const std::string tmp = gecd::testing::MakeTempDir();
  setenv("TMPDIR", tmp.c_str(), 1);
  const auto started = std::chrono::steady_clock::now();
  const RunResult r = RunGecd(
      "tune --set engine.backend=echo --set model.dir=/nonexistent/model "
      "--budget 30s --out " +
      gecd::testing::MakeTempDir() + "/t.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("do not start"));
  EXPECT_THAT(r.output, HasSubstr("model.dir /nonexistent/model"));
  EXPECT_THAT(r.output, HasSubstr("(daemon logs: " + tmp + "/gecd-tune."));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
  unsetenv("TMPDIR");
}

TEST(TuneCommandTest, ABudgetTooShortForOneTrialIsAnErrorNamingTheFlag) {
  const std::string dir = gecd::testing::MakeTempDir();
  const RunResult r =
      RunGecd("tune --config " + WriteEchoConfig(dir) + " --budget 1s --out " + dir + "/t.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--budget 1s is too short"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/t.yaml"));
}

TEST(TuneCommandTest, TunesAnEchoDaemonWithinItsBudget) {
  const std::string dir = gecd::testing::MakeTempDir();
  const std::string config_path = WriteEchoConfig(dir);
  std::filesystem::create_directories(dir + "/out");
  const std::string out = dir + "/out/tuned.yaml";
  const std::string json_path = dir + "/tune.json";
  const auto started = std::chrono::steady_clock::now();
  const RunResult r = RunGecd("tune --config " + config_path +
                              " --budget 20s --slo-p99 500ms --trial 500ms --warmup 200ms --out " +
                              out + " --json " + json_path);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(wall_s, 30) << r.output;
  EXPECT_THAT(r.output, HasSubstr("tune (s of budget)"));  // the progress bar

  // The tuned config loads as `gecd serve --config` reads it, with the settings the JSON names
  // and the rest of the input (its model, found from the new directory; its comment).
  absl::StatusOr<config::Config> tuned = config::LoadConfigFile(out);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  const nlohmann::json json = ReadJson(json_path);
  ASSERT_TRUE(json.is_object()) << json_path;
  EXPECT_EQ(json["slo_met"], true);
  const nlohmann::json& settings = json["settings"];
  EXPECT_EQ(tuned->engine.max_batch_size, settings["engine.max_batch_size"].get<int>());
  EXPECT_EQ(tuned->engine.max_step_tokens, settings["engine.max_step_tokens"].get<int>());
  EXPECT_EQ(tuned->server.workers, settings["server.workers"].get<int>());
  EXPECT_EQ(tuned->engine.backend, "echo");
  EXPECT_EQ(tuned->server.slo_p99_ms, 3600000);
  EXPECT_EQ(std::filesystem::canonical(tuned->model.dir),
            std::filesystem::canonical(gecd::testing::SmallModelDir()));
  const std::string text = gecd::testing::ReadWholeFile(out);
  EXPECT_THAT(text, HasSubstr("# the operator's note"));
  EXPECT_THAT(text, HasSubstr("backend: echo   # no model run"));
  EXPECT_THAT(text, HasSubstr("# Tuned by `gecd tune`"));

  // The figures: a rate within the SLO, and target = concurrency x (1 - 0.3), printed and in
  // the JSON.
  const double rps = json["rps"].get<double>();
  const double concurrency = json["concurrency"].get<double>();
  EXPECT_GT(rps, 0);
  EXPECT_LE(json["p99_ms"].get<double>(), 500);
  EXPECT_GT(concurrency, 0);
  EXPECT_NEAR(json["hpa_target"].get<double>(), concurrency * 0.7, 1e-9);
  EXPECT_NEAR(json["concurrency_littles_law"].get<double>(),
              json["achieved_rps"].get<double>() * json["mean_latency_ms"].get<double>() / 1e3,
              1e-6);
  EXPECT_NEAR(Figure(r.output, "sustainable rate"), rps, 0.051);
  const double printed_concurrency = Figure(r.output, "concurrency");
  EXPECT_NEAR(printed_concurrency, concurrency, 0.0051);
  EXPECT_NEAR(Figure(r.output, "HPA target"), printed_concurrency * 0.7, 0.0051);
  // Within the budget (one daemon start may overrun its estimate a little).
  EXPECT_LE(json["elapsed_s"].get<double>(), 22) << r.output;
  EXPECT_GE(json["candidates"].size(), 2u) << r.output;
  for (const nlohmann::json& c : json["candidates"]) EXPECT_EQ(c["status"], "ok") << c.dump();
}

TEST(TuneCommandTest, AnUnreachableSloExits1WithTheClosestMiss) {
  const std::string dir = gecd::testing::MakeTempDir();
  // Every answer takes at least one 50 ms engine step: p99 <= 30 ms cannot be met.
  const std::string config_path = WriteEchoConfig(dir, "  echo_step_ms: 50\n");
  const RunResult r = RunGecd("tune --config " + config_path +
                              " --budget 8s --slo-p99 30ms --trial 500ms --warmup 100ms --out " +
                              dir + "/tuned.yaml --json " + dir + "/tune.json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no setting met the SLO"));
  EXPECT_THAT(r.output, HasSubstr("The closest: engine.max_batch_size="));
  EXPECT_THAT(r.output, Not(HasSubstr("wrote " + dir + "/tuned.yaml")));
  EXPECT_FALSE(std::filesystem::exists(dir + "/tuned.yaml"));
  const nlohmann::json json = ReadJson(dir + "/tune.json");
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["slo_met"], false);
  EXPECT_EQ(json["hpa_target"], 0);
  EXPECT_FALSE(json["closest"]["passed"].get<bool>());
  EXPECT_GT(json["closest"]["p99_ms"].get<double>(), 30);
  for (const nlohmann::json& c : json["candidates"]) {
    for (const nlohmann::json& t : c["trials"]) {
      EXPECT_GE(t["offered_qps"].get<double>(), 10 / 0.5) << "below 10 requests per trial";
    }
  }
}

}  // namespace
}  // namespace gecd

// Runs the real `gecd eval` binary: in-process on the tiny fixture model (outputs are junk, but
// the run, the report and the copy-the-source baseline are real), against a `gecd serve` on
// the echo backend (outputs equal inputs, so the model scores exactly the copy baseline), and
// with bad inputs, which must end in clear errors.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "eval/gleu.h"
#include "eval/jfleg.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptb_text/ptb_text.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/daemon_process.h"
#include "testing/run_gecd.h"
#include "testing/test_paths.h"

namespace gecd {
namespace {

using ::testing::HasSubstr;

using ::gecd::testing::RunGecd;
using ::gecd::testing::RunResult;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// A JFLEG-shaped split whose sources survive detokenize → tokenize unchanged.
constexpr char kSrc[] =
    "She go to school every day .\n"
    "I do n't like apple , it 's sour .\n"
    "They was happy ( very happy ) !\n"
    "He said \" we is late \" .\n";
constexpr char kRef0[] =
    "She goes to school every day .\n"
    "I do n't like apples , they 're sour .\n"
    "They were happy ( very happy ) !\n"
    "He said \" we are late \" .\n";
constexpr char kRef1[] =
    "She went to school every day .\n"
    "I do n't like apples ; they are sour .\n"
    "They were happy ( very happy ) !\n"
    "He said \" we 're late \" .\n";
constexpr char kSynthetic[] =
    "# type\tsource\ttarget\n"
    "agreement\tShe go home.\tShe goes home.\n"
    "none\tThe cat sat on the mat.\tThe cat sat on the mat.\n"
    "article\tI saw cat.\tI saw a cat.\n"
    "none\tAll is well.\tAll is well.\n";

std::string MakeJflegDir() {
  const std::string dir = gecd::testing::MakeTempDir();
  WriteFile(dir + "/dev.src", kSrc);
  WriteFile(dir + "/dev.ref0", kRef0);
  WriteFile(dir + "/dev.ref1", kRef1);
  return dir;
}

// The GLEU of the unchanged sources, computed here with the library.
double CopyGleu(const std::string& dir, int limit = 0) {
  auto set = eval::LoadJfleg(dir, "dev", limit);
  EXPECT_TRUE(set.ok()) << set.status();
  std::vector<eval::Tokens> src;
  for (const auto& s : set->sources) src.push_back(ptb_text::SplitTokens(s));
  std::vector<std::vector<eval::Tokens>> refs;
  for (const auto& r : set->references) {
    auto& out = refs.emplace_back();
    for (const auto& line : r) out.push_back(ptb_text::SplitTokens(line));
  }
  auto corpus = eval::GleuCorpus::Create(src, refs);
  EXPECT_TRUE(corpus.ok());
  return corpus->Score(src)->mean * 100;
}

class EvalCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The tiny checked-in Llama (vocab 256) with a one-token-per-byte tokenizer.
    model_ = gecd::testing::MakeTempDir() + "/tiny";
    std::filesystem::copy(gecd::testing::FixturePath("models/tiny-llama-bf16"), model_);
    gecd::testing::WriteByteLevelTokenizer(model_);
    jfleg_ = MakeJflegDir();
    synthetic_ = gecd::testing::MakeTempDir() + "/synthetic.tsv";
    WriteFile(synthetic_, kSynthetic);
    report_ = gecd::testing::MakeTempDir() + "/report.json";
  }
  std::string model_, jfleg_, synthetic_, report_;
};

TEST_F(EvalCommandTest, InProcessRunWritesAFullReport) {
  const RunResult r = RunGecd("eval --model " + model_ + " --jfleg " + jfleg_ + " --synthetic " +
                              synthetic_ + " --set model.max_output_tokens=12 --report " + report_ +
                              " --report-outputs --set model.copy_bias=1.5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("source copy"));
  EXPECT_THAT(r.output, HasSubstr("sentences/s"));
  const nlohmann::json j = ReadJson(report_);
  ASSERT_TRUE(j.is_object()) << "report is not JSON";
  EXPECT_EQ(j["settings"]["copy_bias"], 1.5);
  EXPECT_EQ(j["settings"]["spelling"]["dictionary"], "");
  EXPECT_EQ(j["jfleg"]["sentences"], 4);
  EXPECT_EQ(j["jfleg"]["references"], 2);
  EXPECT_EQ(j["jfleg"]["gleu_iterations"], 500);
  EXPECT_NEAR(j["jfleg"]["source_copy_gleu"].get<double>(), CopyGleu(jfleg_), 1e-9);
  EXPECT_NEAR(j["jfleg"]["source_roundtrip_gleu"].get<double>(), CopyGleu(jfleg_), 1e-9);
  const double gleu = j["jfleg"]["model"]["gleu"].get<double>();
  EXPECT_GE(gleu, 0);
  EXPECT_LE(gleu, 100);
  EXPECT_NEAR(j["jfleg"]["model"]["delta_vs_source"].get<double>(),
              gleu - j["jfleg"]["source_copy_gleu"].get<double>(), 1e-9);
  EXPECT_EQ(j["synthetic"]["sentences"], 4);
  EXPECT_EQ(j["synthetic"]["model"]["overall"]["sentences"], 4);
  EXPECT_EQ(j["synthetic"]["model"]["none_sentences"], 2);
  EXPECT_TRUE(j["synthetic"]["model"]["by_type"].contains("article"));
  const auto& t = j["throughput"]["model"];
  EXPECT_EQ(t["sentences"], 8);
  EXPECT_EQ(t["failed"], 0);
  EXPECT_GT(t["wall_s"].get<double>(), 0);
  EXPECT_GT(t["sentences_per_s"].get<double>(), 0);
  // The engine's part alone: no prompts built in it, so no slower than the whole.
  EXPECT_LE(t["engine_wall_s"].get<double>(), t["wall_s"].get<double>());
  EXPECT_GE(t["engine_sentences_per_s"].get<double>(), t["sentences_per_s"].get<double>());
  // Junk model, but it generates: up to 12 tokens per sentence (EOS may stop it earlier).
  EXPECT_GT(t["generated_tokens"].get<int>(), 0);
  EXPECT_LE(t["generated_tokens"].get<int>(), 8 * 12);
  ASSERT_EQ(j["outputs"]["jfleg"].size(), 4u);
  EXPECT_EQ(j["outputs"]["jfleg"][1]["input"], "I don't like apple, it's sour.");
  EXPECT_EQ(j["outputs"]["synthetic"][0]["target"], "She goes home.");
  EXPECT_FALSE(j.contains("compare"));
}

TEST_F(EvalCommandTest, CompareWithTheSameModelAgreesEverywhere) {
  const RunResult r = RunGecd("eval --model " + model_ + " --compare " + model_ + " --jfleg " +
                              jfleg_ + " --synthetic " + synthetic_ +
                              " --set model.max_output_tokens=6 --report " + report_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadJson(report_);
  EXPECT_EQ(j["jfleg"]["agreement"].get<double>(), 1.0);
  EXPECT_EQ(j["jfleg"]["compare_minus_model_gleu"].get<double>(), 0.0);
  EXPECT_EQ(j["jfleg"]["compare"]["gleu"], j["jfleg"]["model"]["gleu"]);
  EXPECT_EQ(j["synthetic"]["agreement"].get<double>(), 1.0);
  EXPECT_TRUE(j["throughput"].contains("compare"));
  EXPECT_THAT(r.output, HasSubstr("outputs agree on 100.0%"));
}

TEST_F(EvalCommandTest, SharedJflegDevCopyBaselineIsThePublishedOne) {
  const auto dir = gecd::testing::SharedDataPath("jfleg");
  if (!dir) GTEST_SKIP() << "../shared/data/jfleg is absent";
  // All 754 sentences, 2 output tokens each: the copy baseline is the published 38.21.
  const RunResult r = RunGecd("eval --model " + model_ + " --jfleg " + *dir +
                              " --set model.max_output_tokens=2 --report " + report_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadJson(report_);
  EXPECT_EQ(j["jfleg"]["sentences"], 754);
  EXPECT_EQ(j["jfleg"]["references"], 4);
  EXPECT_NEAR(j["jfleg"]["source_copy_gleu"].get<double>(), 38.21, 0.005);
  EXPECT_NEAR(j["jfleg"]["source_roundtrip_gleu"].get<double>(), 38.21, 0.2);
  EXPECT_THAT(r.output, HasSubstr("source copy   38.21"));
}

TEST_F(EvalCommandTest, BadInputsAreClearErrors) {
  RunResult r = RunGecd("eval --model " + model_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("nothing to evaluate"));
  r = RunGecd("eval --model " + model_ + " --server 127.0.0.1:1 --jfleg " + jfleg_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("exclude each other"));
  r = RunGecd("eval --model " + model_ + " --synthetic " + synthetic_ + " --min-gleu-delta 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--min-gleu-delta needs --jfleg"));
  r = RunGecd("eval --model " + model_ + " --jfleg " + jfleg_ + " --min-gleu-delta x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--min-gleu-delta wants a number"));
  r = RunGecd("eval --model " + model_ + " --jfleg /nonexistent/jfleg");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/jfleg: no such directory"));

  const std::string short_ref = MakeJflegDir();
  WriteFile(short_ref + "/dev.ref1", "only one line .\n");
  r = RunGecd("eval --model " + model_ + " --jfleg " + short_ref);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output,
              HasSubstr(short_ref + "/dev.ref1 has 1 lines but " + short_ref + "/dev.src has 4"));
  const std::string empty_src = MakeJflegDir();
  WriteFile(empty_src + "/dev.src", "");
  r = RunGecd("eval --model " + model_ + " --jfleg " + empty_src);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(empty_src + "/dev.src: empty file"));
  const std::string no_refs = gecd::testing::MakeTempDir();
  WriteFile(no_refs + "/dev.src", kSrc);
  r = RunGecd("eval --model " + model_ + " --jfleg " + no_refs);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("dev.ref0: no such file"));

  const std::string bad_tsv = gecd::testing::MakeTempDir() + "/bad.tsv";
  WriteFile(bad_tsv, "agreement\tno target\n");
  r = RunGecd("eval --model " + model_ + " --synthetic " + bad_tsv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(bad_tsv + ":1: expected error_type<TAB>source<TAB>target"));
  // A sentence the model refuses fails alone, named by file and line.
  const std::string long_tsv = gecd::testing::MakeTempDir() + "/long.tsv";
  WriteFile(long_tsv, "none\tShort one.\tShort one.\n# c\nnone\t" + std::string(300, 'a') + "\t" +
                          std::string(300, 'a') + "\n");
  r = RunGecd("eval --model " + model_ + " --synthetic " + long_tsv +
              " --set model.max_output_tokens=2 --report " + report_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(long_tsv + " line 3 failed: prompt is 300 tokens, more than the "
                                             "limit of 256 (model.max_input_tokens)"));
  EXPECT_THAT(r.output, HasSubstr("1 of 2 sentences failed"));
  EXPECT_EQ(ReadJson(report_)["throughput"]["model"]["failed"], 1);
  r = RunGecd("eval --model /nonexistent/model --jfleg " + jfleg_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model/config.json"));
  r = RunGecd("eval --server 127.0.0.1:" + std::to_string(gecd::testing::FreeTcpPort()) +
              " --jfleg " + jfleg_);
  if (RunGecd("serve --help").exit_code == 0) {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.output, HasSubstr("cannot connect"));
  } else {  // built without the daemon
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.output, HasSubstr("--server needs a build with gRPC"));
  }
}

// The echo backend returns every prompt unchanged, and the daemon's template is "{text}": the
// outputs are the detokenized sources, which tokenize back to the sources.
TEST_F(EvalCommandTest, ServerModeWithEchoScoresTheCopyBaseline) {
  if (RunGecd("serve --help").exit_code != 0) GTEST_SKIP() << "gecd is built without the daemon";
  // One token per byte: the longest JFLEG sentences need more than the default 256.
  gecd::testing::DaemonProcess daemon({"model.max_input_tokens=2048"});
  ASSERT_TRUE(daemon.WaitReady());
  const RunResult r = RunGecd("eval --server " + daemon.grpc_target() + " --jfleg " + jfleg_ +
                              " --synthetic " + synthetic_ + " --in-flight 3 --report " + report_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadJson(report_);
  EXPECT_EQ(j["jfleg"]["model"]["gleu"].get<double>(),
            j["jfleg"]["source_copy_gleu"].get<double>());
  EXPECT_EQ(j["jfleg"]["model"]["delta_vs_source"].get<double>(), 0.0);
  EXPECT_EQ(j["synthetic"]["model"]["false_changes"], 0);
  EXPECT_EQ(j["synthetic"]["model"]["false_change_rate"].get<double>(), 0.0);
  EXPECT_EQ(j["synthetic"]["model"]["by_type"]["none"]["accuracy"].get<double>(), 1.0);
  EXPECT_EQ(j["synthetic"]["model"]["by_type"]["agreement"]["exact"], 0);
  EXPECT_EQ(j["throughput"]["model"]["failed"], 0);
  EXPECT_EQ(j["throughput"]["model"]["where"], "server " + daemon.grpc_target());
  // Echo reports the prompt as its output tokens: one per byte here.
  EXPECT_GT(j["throughput"]["model"]["generated_tokens"].get<int>(), 100);

  // The gate: copying gains nothing over the source and changes no correct sentence.
  RunResult gated =
      RunGecd("eval --server " + daemon.grpc_target() + " --jfleg " + jfleg_ + " --synthetic " +
              synthetic_ + " --min-gleu-delta 0 --max-false-change-rate 0 --report " + report_);
  EXPECT_EQ(gated.exit_code, 0) << gated.output;
  EXPECT_EQ(ReadJson(report_)["gate"]["passed"], true);
  gated = RunGecd("eval --server " + daemon.grpc_target() + " --jfleg " + jfleg_ +
                  " --min-gleu-delta 0.5 --report " + report_);
  EXPECT_EQ(gated.exit_code, 3) << gated.output;
  EXPECT_THAT(gated.output, HasSubstr("gate failed: JFLEG GLEU +0.00 vs the source copy is below "
                                      "--min-gleu-delta 0.5"));
  EXPECT_EQ(ReadJson(report_)["gate"]["passed"], false);

  const auto dir = gecd::testing::SharedDataPath("jfleg");
  if (!dir) return;
  // All of JFLEG dev, 64 requests in flight: echo equals the round-tripped source exactly.
  const RunResult all = RunGecd("eval --server " + daemon.grpc_target() + " --jfleg " + *dir +
                                " --report " + report_ + " --report-outputs");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const nlohmann::json k = ReadJson(report_);
  int differ = 0;
  for (const auto& row : k["outputs"]["jfleg"]) {
    if (row["model"] != row["input"] && ++differ <= 5) {
      ADD_FAILURE() << "echo changed " << row["input"] << " into " << row["model"];
    }
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(k["jfleg"]["sentences"], 754);
  EXPECT_EQ(k["jfleg"]["model"]["gleu"].get<double>(),
            k["jfleg"]["source_roundtrip_gleu"].get<double>());
  EXPECT_NEAR(k["jfleg"]["model"]["gleu"].get<double>(), 38.21, 0.2);
}

}  // namespace
}  // namespace gecd

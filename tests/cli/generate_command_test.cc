// Runs the real `gecd generate` binary on a random model with the checked-in SentencePiece
// tokenizer: flags and config overrides reach the engine, batched outputs equal single ones,
// and bad arguments end with a usage error instead of a run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/random_model.h"
#include "testing/run_gecd.h"
#include "testing/test_paths.h"

namespace gecd {
namespace {

using ::testing::HasSubstr;

using ::gecd::testing::Lines;
using ::gecd::testing::RunGecd;
using ::gecd::testing::RunResult;

class GenerateCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = gecd::testing::MakeTempDir() + "/model";
    gecd::testing::RandomModelOptions options;
    options.vocab_size = 2000;  // the sp_brown tokenizer's size
    options.seed = 5;
    ASSERT_TRUE(gecd::testing::WriteRandomModel(model_, options).ok());
    std::filesystem::copy_file(gecd::testing::FixturePath("tokenizers/sp_brown/tokenizer.model"),
                               model_ + "/tokenizer.model");
  }
  std::string model_;
};

TEST_F(GenerateCommandTest, BatchedOutputsEqualSingleOnes) {
  const RunResult both =
      RunGecd("generate --model " + model_ +
              " --max-new-tokens 6 'The cat sat.' 'A much longer sentence here.'");
  ASSERT_EQ(both.exit_code, 0) << both.output;
  const auto lines = Lines(both.output);
  ASSERT_EQ(lines.size(), 2u) << both.output;
  EXPECT_FALSE(lines[0].empty());
  const RunResult first =
      RunGecd("generate --model " + model_ + " --max-new-tokens 6 'The cat sat.'");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(Lines(first.output), std::vector<std::string>{lines[0]});
}

TEST_F(GenerateCommandTest, TemplateAndOverridesChangeTheRun) {
  const RunResult plain = RunGecd("generate --model " + model_ + " --max-new-tokens 8 'Hello.'");
  const RunResult templated =
      RunGecd("generate --model " + model_ +
              " --max-new-tokens 8 --prompt-template 'Fix: {text}' 'Hello.'");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(templated.exit_code, 0) << templated.output;
  EXPECT_NE(plain.output, templated.output);
  // --set reaches the engine: a different KV block size pages differently, same answer.
  const RunResult small_cache = RunGecd(
      "generate --model " + model_ + " --max-new-tokens 8 --set engine.kv_block_size=4 'Hello.'");
  ASSERT_EQ(small_cache.exit_code, 0) << small_cache.output;
  EXPECT_EQ(small_cache.output, plain.output);
}

TEST_F(GenerateCommandTest, ConfigFileSuppliesModelAndTemplate) {
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/c.yaml") << "model:\n  dir: " << model_
                                 << "\n  prompt_template: 'Fix: {text}'\n  max_output_tokens: 8\n";
  const RunResult from_config = RunGecd("generate --config " + dir + "/c.yaml 'Hello.'");
  const RunResult from_flags =
      RunGecd("generate --model " + model_ +
              " --max-new-tokens 8 --prompt-template 'Fix: {text}' 'Hello.'");
  ASSERT_EQ(from_config.exit_code, 0) << from_config.output;
  EXPECT_EQ(from_config.output, from_flags.output);
}

TEST_F(GenerateCommandTest, ARefusedTextFailsAloneAndBlankTextComesBackAsItIs) {
  const RunResult good =
      RunGecd("generate --model " + model_ + " --max-new-tokens 6 'The cat sat.'");
  ASSERT_EQ(good.exit_code, 0) << good.output;
  const RunResult mixed =
      RunGecd("generate --model " + model_ +
              " --max-new-tokens 6 'The cat sat.' \"$(printf 'bad\\001text')\" '   '");
  EXPECT_EQ(mixed.exit_code, 1) << mixed.output;
  EXPECT_THAT(mixed.output, HasSubstr("TEXT 2: text has the control character U+0001"));
  const std::vector<std::string> lines = Lines(mixed.output);
  // The good line as alone, an empty line for the refused TEXT, the blank TEXT unchanged.
  EXPECT_THAT(lines, ::testing::Contains(Lines(good.output)[0]));
  EXPECT_THAT(lines, ::testing::Contains("   "));
}

TEST_F(GenerateCommandTest, BadArgumentsAreUsageErrors) {
  RunResult r = RunGecd("generate --model " + model_ + " --set engine.thread=2 'Hi'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown key 'engine.thread'"));
  r = RunGecd("generate --model " + model_ + " --set engine.threads 'Hi'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("KEY=VALUE"));
  r = RunGecd("generate --model " + model_ + " --prompt-template 'no slot' 'Hi'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("{text}"));
  r = RunGecd("generate --model " + model_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no TEXT"));
  r = RunGecd("generate --model /nonexistent/model 'Hi'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model/config.json"));
}

}  // namespace
}  // namespace gecd

// `gecd inspect` and `gecd quantize` on the command line: help, usage errors, a real run.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/run_gecd.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"

namespace gecd::cli {
namespace {

using ::gecd::testing::RunGecd;
using ::gecd::testing::RunResult;
using ::testing::HasSubstr;

TEST(ModelCommandsTest, HelpIsExitZeroWithTheFlags) {
  const RunResult inspect = RunGecd("inspect --help");
  EXPECT_EQ(inspect.exit_code, 0);
  EXPECT_THAT(inspect.output, HasSubstr("usage: gecd inspect --model DIR"));
  EXPECT_THAT(inspect.output, HasSubstr("--skip-error"));
  const RunResult quantize = RunGecd("quantize --help");
  EXPECT_EQ(quantize.exit_code, 0);
  EXPECT_THAT(quantize.output, HasSubstr("--no-attention-fp8"));
}

TEST(ModelCommandsTest, UsageErrorsAreExitTwoNamingTheProblem) {
  const RunResult missing = RunGecd("inspect");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output,
              HasSubstr("gecd inspect: INVALID_ARGUMENT: missing required flag --model"));
  EXPECT_THAT(missing.output, HasSubstr("usage: gecd inspect"));
  const RunResult extra = RunGecd("quantize --in a --out b stray");
  EXPECT_EQ(extra.exit_code, 2);
  EXPECT_THAT(extra.output, HasSubstr("unexpected argument 'stray'"));
  const RunResult no_out = RunGecd("quantize --in a");
  EXPECT_EQ(no_out.exit_code, 2);
  EXPECT_THAT(no_out.output, HasSubstr("missing required flag --out"));
}

TEST(ModelCommandsTest, QuantizeThenInspectTheResult) {
  testing::ScopedTempDir dir;
  const std::string out = dir.path() + "/fp8";
  const RunResult quantize =
      RunGecd("quantize --in " + testing::FixturePath("models/ref-llama-bf16") + " --out " + out);
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  EXPECT_THAT(quantize.output, HasSubstr("wrote " + out + " (attention and MLP FP8)"));
  const RunResult inspect = RunGecd("inspect --skip-error --model " + out);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_THAT(inspect.output, HasSubstr("architecture   LlamaForCausalLM"));
  const RunResult missing = RunGecd("inspect --model " + dir.path() + "/none");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("gecd inspect: "));
}

}  // namespace
}  // namespace gecd::cli

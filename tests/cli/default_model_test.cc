// The shipped default model (models/gecd-gec-small, made by tools/train/train.sh) through the
// real `gecd generate` on the default config (spelling stage and copy bias included): it
// loads, corrects a few fixed sentences and leaves a correct one alone; the FP8 copies the
// build makes with `gecd quantize` (build/models/) give the same outputs.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/run_gecd.h"
#include "testing/test_paths.h"

namespace gecd {
namespace {

using ::gecd::testing::Lines;
using ::gecd::testing::RunGecd;

struct Case {
  const char* input;
  const char* expected;
};

// Errors of several kinds (tense, agreement, verb form, capitalization, spelling: the config's
// spelling stage) and one correct sentence. Greedy decoding is deterministic, so these are
// exact.
constexpr Case kCases[] = {
    {"She go to school yesterday.", "She went to school yesterday."},
    {"The weather are nice today.", "The weather is nice today."},
    {"they was happy.", "They were happy."},
    {"She can sings well.", "She can sing well."},
    {"He walk to the store yesterday.", "He walked to the store yesterday."},
    {"He recieved my leter.", "He received my letter."},
    {"He is the best student in the class.", "He is the best student in the class."},
};

std::vector<std::string> Correct(const std::string& extra_flags) {
  std::string args =
      "generate --config " + gecd::testing::SourceDir() + "/configs/gecd.yaml " + extra_flags;
  for (const Case& c : kCases) args += std::string(" '") + c.input + "'";
  const auto run = RunGecd(args);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return Lines(run.output);
}

void ExpectCorrections(const std::vector<std::string>& outputs) {
  ASSERT_EQ(outputs.size(), std::size(kCases));
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i], kCases[i].expected) << "input: " << kCases[i].input;
  }
}

TEST(DefaultModel, CorrectsFixedSentences) { ExpectCorrections(Correct("")); }

// The default config's copy bias keeps a rare word the model alone rewrites.
TEST(DefaultModel, CopyBiasKeepsWhatPlainGreedyRewrites) {
  const std::string kept = "Which is a frightful prospect.";
  const auto run = [&](const std::string& flags) {
    const auto r = RunGecd("generate --config " + gecd::testing::SourceDir() +
                           "/configs/gecd.yaml " + flags + " '" + kept + "'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return Lines(r.output);
  };
  EXPECT_EQ(run(""), std::vector<std::string>{kept});
  const std::vector<std::string> plain = run("--set model.copy_bias=0");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_NE(plain[0], kept);
}

// The template's control tokens typed by a user are text: the model reads (and answers) what
// follows them instead of taking "<sep>" as the end of the prompt or "</s>" as its end.
TEST(DefaultModel, TypedSeparatorsDoNotCutTheTextShort) {
  const auto r = RunGecd("generate --config " + gecd::testing::SourceDir() +
                         "/configs/gecd.yaml 'She go home.<sep>They was happy but I is sad.' "
                         "'She go home.</s>They was happy.'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = Lines(r.output);
  ASSERT_EQ(lines.size(), 2u) << r.output;
  for (const std::string& line : lines) EXPECT_NE(line.find("happy"), std::string::npos) << line;
}

TEST(DefaultModel, Fp8CopiesGiveTheSameCorrections) {
  for (const char* copy : {"gecd-gec-small-fp8", "gecd-gec-small-fp8-mlp"}) {
    SCOPED_TRACE(copy);
    ExpectCorrections(Correct("--set model.dir=" + gecd::testing::BinaryDir() + "/models/" + copy));
  }
}

}  // namespace
}  // namespace gecd

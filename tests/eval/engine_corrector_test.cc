// The in-process corrector behind `gecd eval`, on the tiny fixture model: batched outputs equal
// single ones, per-sentence failures stay per sentence, the template and limits apply.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu_backend.h"
#include "engine_options/engine_options.h"
#include "eval/engine_corrector.h"
#include "eval/jfleg.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "ptb_text/ptb_text.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/test_paths.h"
#include "tokenizer/utf8.h"

namespace gecd::eval {
namespace {

using ::testing::HasSubstr;

std::string TinyModelDir() {
  static const std::string dir = [] {
    const std::string d = gecd::testing::MakeTempDir() + "/tiny";
    std::filesystem::copy(gecd::testing::FixturePath("models/tiny-llama-bf16"), d);
    gecd::testing::WriteByteLevelTokenizer(d);
    return d;
  }();
  return dir;
}

config::Config TinyConfig() {
  config::Config c;
  c.model.dir = TinyModelDir();
  c.model.max_output_tokens = 8;
  c.model.max_input_tokens = 64;
  c.engine.threads = 1;
  return c;
}

CorrectionRun RunAll(Corrector& corrector, const std::vector<std::string>& texts) {
  absl::StatusOr<CorrectionRun> run = corrector.CorrectAll(texts, nullptr);
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *std::move(run) : CorrectionRun{};
}

TEST(EngineCorrectorTest, BatchedOutputsEqualSingleOnesAndFailuresStayAlone) {
  auto corrector = EngineCorrector::Create(TinyConfig());
  ASSERT_TRUE(corrector.ok()) << corrector.status();
  const std::string too_long(100, 'x');  // 100 byte tokens > max_input_tokens 64
  const std::vector<std::string> texts = {"She go home.", "", too_long, "I saw cat."};
  const CorrectionRun all = RunAll(**corrector, texts);
  ASSERT_EQ(all.outputs.size(), 4u);
  EXPECT_EQ(all.failed, 2);
  EXPECT_EQ(all.errors[0], "");
  EXPECT_EQ(all.errors[1], "text is empty");
  EXPECT_THAT(all.errors[2], HasSubstr("prompt is 100 tokens, more than the limit of 64"));
  EXPECT_EQ(all.errors[3], "");
  EXPECT_GT(all.generated_tokens, 0);
  EXPECT_LE(all.generated_tokens, 2 * 8);  // model.max_output_tokens caps each output
  EXPECT_GT(all.wall_s, 0);
  EXPECT_GT(all.engine_wall_s, 0);
  EXPECT_LE(all.engine_wall_s, all.wall_s);
  EXPECT_EQ(RunAll(**corrector, {"She go home."}).outputs[0], all.outputs[0]);
  EXPECT_EQ(RunAll(**corrector, {"I saw cat."}).outputs[0], all.outputs[3]);
}

// The outputs are those of a plain Engine::Step() loop over the templated prompts, stop tokens
// dropped, as `gecd generate` runs them, whatever the admission waves.
TEST(EngineCorrectorTest, OutputsEqualAPlainStepLoopOverTheTemplatedPrompts) {
  config::Config cfg = TinyConfig();
  cfg.model.prompt_template = "<{text}>";
  cfg.model.max_output_tokens = 16;
  cfg.engine.max_batch_size = 3;  // several waves of admissions
  const std::vector<std::string> texts = {"She go home.", "They was here.", "A cat sat.",
                                          "I has a dog.", "We goes now.",   "He am tall.",
                                          "It are red."};
  auto corrector = EngineCorrector::Create(cfg);
  ASSERT_TRUE(corrector.ok()) << corrector.status();
  const CorrectionRun run = RunAll(**corrector, texts);

  auto checkpoint = model::Checkpoint::Open(cfg.model.dir);
  auto tokenizer = model::Tokenizer::LoadFromModelDir(cfg.model.dir);
  ASSERT_TRUE(checkpoint.ok() && tokenizer.ok());
  // The backend the config asks for (engine.cpu_matmul auto: bf16 on a CPU with BF16), so both
  // sides run the same precision.
  auto backend =
      engine::CpuBackend::Create(**checkpoint, config::CpuBackendOptionsFrom(cfg.engine));
  ASSERT_TRUE(backend.ok());
  engine::EngineOptions options;
  for (int id : (*checkpoint)->generation_config().eos_token_ids)
    options.eos_token_ids.push_back(id);
  engine::Engine engine(backend->get(), tokenizer->get(), options);
  engine::GenerationParams params;
  params.max_new_tokens = 16;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = (*tokenizer)->Encode("<" + texts[i] + ">");
    ASSERT_TRUE(ids.ok());
    ASSERT_TRUE(engine.AddSequence(i, *ids, params).ok());
  }
  std::vector<std::vector<int32_t>> generated(texts.size());
  int64_t tokens = 0;
  while (engine.HasWork()) {
    auto events = engine.Step();
    ASSERT_TRUE(events.ok());
    for (const auto& e : *events) {
      if (e.reason != engine::FinishReason::kStopToken) {
        generated[e.id].push_back(e.token);
        ++tokens;
      }
    }
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    // Junk bytes from a random model: invalid UTF-8 is replaced, as the server does.
    EXPECT_EQ(run.outputs[i], model::ToValidUtf8((*tokenizer)->Decode(generated[i]))) << i;
  }
  EXPECT_EQ(run.generated_tokens, tokens);
}

TEST(EngineCorrectorTest, UsesTheConfiguredPromptTemplate) {
  auto plain = EngineCorrector::Create(TinyConfig());
  config::Config templated_config = TinyConfig();
  templated_config.model.prompt_template = "Fix: {text} =>";
  auto templated = EngineCorrector::Create(templated_config);
  ASSERT_TRUE(plain.ok() && templated.ok());
  const std::vector<std::string> texts = {"She go home.", "They was here.", "A cat sat."};
  EXPECT_NE(RunAll(**plain, texts).outputs, RunAll(**templated, texts).outputs);
  config::Config bad = TinyConfig();
  bad.model.prompt_template = "no slot";
  EXPECT_THAT(EngineCorrector::Create(bad).status().message(), HasSubstr("{text}"));
}

// Speculative decoding (engine.speculate_tokens) changes how many steps a sentence takes, never
// its output: the default model on JFLEG dev sources (the first 120: the whole set is `gecd
// eval --compare-set engine.speculate_tokens=0`'s job) and on bad input, with and without the
// copy bias, byte for byte the outputs of plain greedy decoding; and so on the FP8 copy the build
// makes with `gecd quantize` (build/models/), whose e4m3 layers the cpu backend emulates.
TEST(EngineCorrectorTest, SpeculativeDecodingChangesNoOutputOfTheDefaultModel) {
  const auto jfleg = gecd::testing::SharedDataPath("jfleg");
  if (!jfleg) GTEST_SKIP() << "../shared/data/jfleg is absent";
  auto set = LoadJfleg(*jfleg, "dev", 120);
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<std::string> texts;
  for (const std::string& s : set->sources) texts.push_back(ptb_text::PtbDetokenize(s));
  // Bad input: empty, one token, one letter 2,000 times, symbols the model never copies.
  for (const std::string& bad : {std::string(), std::string("a"), std::string(2000, 'a'),
                                 std::string("\u2603\u2604 \u00a9\u00ae\u2122 \u0416\u0436"),
                                 std::string("the the the the the the the the")}) {
    texts.push_back(bad);
  }
  const std::string bf16 = gecd::testing::SourceDir() + "/models/gecd-gec-small";
  const std::string fp8 = gecd::testing::BinaryDir() + "/models/gecd-gec-small-fp8";
  for (const auto& [model, copy_bias] :
       {std::pair{bf16, 0.0}, std::pair{bf16, 2.0}, std::pair{fp8, 0.0}, std::pair{fp8, 2.0}}) {
    SCOPED_TRACE(model + (copy_bias > 0 ? ", copy bias 2" : ", no copy bias"));
    std::vector<CorrectionRun> runs;
    for (int speculate : {0, 8}) {
      config::Config c;
      c.model.dir = model;
      c.model.prompt_template = "<s>{text}<sep>";
      c.model.max_input_tokens = 2048;
      c.model.copy_bias = copy_bias;
      c.engine.threads = 2;
      c.engine.speculate_tokens = speculate;
      auto corrector = EngineCorrector::Create(c);
      ASSERT_TRUE(corrector.ok()) << corrector.status();
      runs.push_back(RunAll(**corrector, texts));
    }
    ASSERT_EQ(runs[0].outputs.size(), texts.size());
    ASSERT_EQ(runs[1].outputs.size(), texts.size());
    int differ = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(runs[1].outputs[i], runs[0].outputs[i]) << "sentence " << i << ": " << texts[i];
      EXPECT_EQ(runs[1].errors[i], runs[0].errors[i]) << "sentence " << i;
      differ += runs[1].outputs[i] != runs[0].outputs[i] ? 1 : 0;
    }
    EXPECT_EQ(differ, 0);
    EXPECT_EQ(runs[1].generated_tokens, runs[0].generated_tokens);
    // Not vacuous: drafts were verified and saved steps (the simulation in issue 26: 7.8x).
    EXPECT_EQ(runs[0].accepted_drafts + runs[0].rejected_drafts, 0);
    EXPECT_GT(runs[1].accepted_drafts, runs[1].rejected_drafts);
    EXPECT_LT(runs[1].sequence_steps * 2, runs[0].sequence_steps);
  }
}

}  // namespace
}  // namespace gecd::eval

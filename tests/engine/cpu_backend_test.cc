#include "engine/cpu_backend.h"

#include <cblas.h>

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/memory_limit.h"
#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cpu_features.h"
#include "testing/random_model.h"
#include "testing/sanitized.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::engine {
namespace {

using testing::BackendDriver;
using testing::LoadFixtureModel;
using testing::LoadReference;
using testing::RelativeError;

// Logits the CPU backend computes in f32 agree with Hugging Face's f32 forward within
// kF32Bound (relative error as defined in engine_test_util.h). For the bf16 checkpoints the
// f32 reference is the same bf16 weights upcast, which is what the CPU backend runs.
constexpr double kF32Bound = 1e-4;
// HF running natively in bf16 rounds every activation to 8 bits of mantissa; the f32 engine
// stays within this of it on these models (measured: 1.9e-2 Llama, 2.7e-2 Qwen2).
constexpr double kBf16NativeBound = 6e-2;

// One comparison against a Hugging Face reference file of a fixture model.
struct ReferenceCase {
  const char* name;
  const char* model;
  const char* file;
  double bound;
};

// Names the case in ctest and failure output instead of dumping the struct's bytes.
void PrintTo(const ReferenceCase& c, std::ostream* os) { *os << c.model << " vs " << c.file; }

class ReferenceLogitsTest : public ::testing::TestWithParam<ReferenceCase> {};

// Every reference position of every prompt as its own sequence (prompt[:p+1]), all in one
// batch of mixed lengths, must reproduce HF's logits at p.
TEST_P(ReferenceLogitsTest, BatchedPrefixesMatchHf) {
  const std::string model = GetParam().model;
  const std::string file = GetParam().file;
  const double bound = GetParam().bound;
  auto m = LoadFixtureModel(model);
  ASSERT_NE(m.backend, nullptr);
  const auto cases = LoadReference(model, file);
  BackendDriver batched(m.backend.get());
  std::vector<const std::vector<float>*> expected;
  for (const auto& c : cases) {
    for (size_t k = 0; k < c.positions.size(); ++k) {
      batched.Add({c.prompt.begin(), c.prompt.begin() + c.positions[k] + 1});
      expected.push_back(&c.logits[k]);
    }
  }
  const auto got = batched.RunAll(/*chunk=*/1 << 20);
  ASSERT_EQ(got.size(), expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = RelativeError(got[i], *expected[i]);
    worst = std::max(worst, err);
    EXPECT_LE(err, bound) << model << " sequence " << i;
  }
  std::printf("[ %s vs %s ] max relative error %.3g (bound %.0e)\n", model.c_str(), file.c_str(),
              worst, bound);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ReferenceLogitsTest,
    ::testing::Values(
        ReferenceCase{"LlamaF32", "ref-llama-f32", "reference_logits.json", kF32Bound},
        ReferenceCase{"Qwen2F32", "ref-qwen2-f32", "reference_logits.json", kF32Bound},
        ReferenceCase{"LlamaBf16WeightsInF32", "ref-llama-bf16", "reference_logits.json",
                      kF32Bound},
        ReferenceCase{"Qwen2Bf16WeightsInF32", "ref-qwen2-bf16", "reference_logits.json",
                      kF32Bound},
        ReferenceCase{"LlamaBf16VsHfNativeBf16", "ref-llama-bf16", "reference_logits_bf16.json",
                      kBf16NativeBound},
        ReferenceCase{"Qwen2Bf16VsHfNativeBf16", "ref-qwen2-bf16", "reference_logits_bf16.json",
                      kBf16NativeBound}),
    [](const auto& info) { return std::string(info.param.name); });

// Prefill once, then decode HF's greedy continuation one token per step: every step's argmax
// is HF's next greedy token and the last step's logits are HF's (this reads the KV cache).
class DecodeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeTest, DecodeStepsMatchHfGreedy) {
  auto m = LoadFixtureModel(GetParam());
  ASSERT_NE(m.backend, nullptr);
  for (const auto& c : LoadReference(GetParam())) {
    BackendDriver driver(m.backend.get());
    std::vector<int32_t> tokens = c.prompt;
    tokens.insert(tokens.end(), c.greedy.begin(), c.greedy.end() - 1);
    const int seq = driver.Add(tokens);
    auto logits = driver.Step({{seq, static_cast<int>(c.prompt.size())}});
    EXPECT_EQ(testing::Argmax(logits[0]), c.greedy[0]);
    for (size_t g = 1; g < c.greedy.size(); ++g) {
      logits = driver.Step({{seq, 1}});
      EXPECT_EQ(testing::Argmax(logits[0]), c.greedy[g]) << "greedy step " << g;
    }
    EXPECT_LE(RelativeError(logits[0], c.greedy_logits), kF32Bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeTest, ::testing::Values("ref-llama-f32", "ref-qwen2-f32"));

// The same sequences alone, batched together, and prefilled in chunks of 3 (each chunk reading
// the cache the previous wrote) give the same logits up to f32 summation order.
TEST_P(DecodeTest, BatchedAndChunkedEqualUnbatched) {
  auto m = LoadFixtureModel(GetParam());
  ASSERT_NE(m.backend, nullptr);
  const auto cases = LoadReference(GetParam());
  std::vector<std::vector<float>> alone;
  for (const auto& c : cases) {
    BackendDriver driver(m.backend.get());
    driver.Add(c.prompt);
    alone.push_back(driver.RunAll(1 << 20)[0]);
  }
  for (int chunk : {1 << 20, 3}) {
    BackendDriver driver(m.backend.get());
    for (const auto& c : cases) driver.Add(c.prompt);
    const auto together = driver.RunAll(chunk);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_LE(RelativeError(together[i], alone[i]), 1e-5) << "chunk " << chunk << " case " << i;
      EXPECT_EQ(testing::Argmax(together[i]), testing::Argmax(alone[i]));
    }
  }
}

// The engine's start-up line says which kernels the matmuls run, and whether the environment
// chose them (one of our boxes sets OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU).
TEST(CpuBackendTest, DescribeNamesTheOpenBlasKernels) {
  auto m = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 8});
  ASSERT_NE(m.backend, nullptr);
  const std::string what = m.backend->Describe();
  EXPECT_THAT(what, ::testing::StartsWith("cpu, f32 matmuls: OpenBLAS "));
  EXPECT_THAT(what, ::testing::HasSubstr(openblas_get_corename()));
  EXPECT_EQ(what.find("OPENBLAS_CORETYPE") != std::string::npos,
            std::getenv("OPENBLAS_CORETYPE") != nullptr);
}

TEST(CpuBackendTest, RejectsMalformedBatches) {
  auto m = LoadFixtureModel(
      "ref-llama-f32",
      {.kv_block_size = 4, .num_kv_blocks = 8, .max_step_tokens = 16, .max_batch_size = 4});
  ASSERT_NE(m.backend, nullptr);
  StepResult result;
  const std::vector<int32_t> blocks = {0, 1};
  auto forward = [&](std::vector<int32_t> tokens, int start, std::vector<int32_t> table) {
    StepBatch batch;
    batch.Add(tokens, start, table, true);
    return m.backend->Forward(batch, &result);
  };
  EXPECT_TRUE(forward({5, 6, 7}, 0, blocks).ok());
  EXPECT_EQ(forward({5, 256}, 0, blocks).code(), absl::StatusCode::kInvalidArgument);  // vocab
  EXPECT_EQ(forward({5, 6}, 7, blocks).code(), absl::StatusCode::kInvalidArgument);    // table
  EXPECT_EQ(forward({5}, 0, {8}).code(), absl::StatusCode::kInvalidArgument);          // block id
  EXPECT_EQ(forward({5}, -1, blocks).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(forward(std::vector<int32_t>(17, 5), 0, {0, 1, 2, 3, 4}).code(),
            absl::StatusCode::kInvalidArgument);  // over max_step_tokens
  StepBatch many;
  for (int i = 0; i < 5; ++i) many.Add(std::vector<int32_t>{5}, 0, blocks, true);
  EXPECT_EQ(m.backend->Forward(many, &result).code(), absl::StatusCode::kInvalidArgument);
  // previous_sample: only for a one-token entry, and within the previous step's samples.
  ASSERT_TRUE(forward({5, 6, 7}, 0, blocks).ok());
  StepBatch chained;
  chained.Add(std::vector<int32_t>{0}, 3, blocks, true, /*previous_sample=*/1);
  EXPECT_EQ(m.backend->Forward(chained, &result).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(forward({5, 6, 7}, 0, blocks).ok());
  chained.Clear();
  chained.Add(std::vector<int32_t>{0, 0}, 3, blocks, true, /*previous_sample=*/0);
  EXPECT_EQ(m.backend->Forward(chained, &result).code(), absl::StatusCode::kInvalidArgument);
  // A sequence whose tokens run past the batch's.
  StepBatch truncated;
  truncated.Add(std::vector<int32_t>{5, 6, 7}, 0, blocks, true);
  truncated.tokens.pop_back();
  const absl::Status past = m.backend->Forward(truncated, &result);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.message(), ::testing::HasSubstr("step sequence 0"));
}

TEST(CpuBackendTest, RejectsMalformedCopyBias) {
  auto m = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 8});
  ASSERT_NE(m.backend, nullptr);
  const std::vector<int32_t> blocks = {0, 1};
  const std::vector<int32_t> text = {5, 6};
  auto forward = [&](bool sample, float bias, CopyCursor cursor, int32_t end_token,
                     std::vector<int32_t> copy_tokens = {}) {
    StepBatch batch;
    batch.Add(std::vector<int32_t>{5, 6, 7}, 0, blocks, sample);
    batch.SetCopyBias(text, bias, end_token, cursor, /*advance=*/true);
    if (!copy_tokens.empty()) batch.copy_tokens = copy_tokens;
    StepResult result;
    return m.backend->Forward(batch, &result);
  };
  EXPECT_TRUE(forward(true, 1.0f, {.position = 2, .aligned = true}, 1).ok());
  EXPECT_EQ(forward(false, 1.0f, {}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(forward(true, NAN, {}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(forward(true, 1.0f, {.position = 3, .aligned = true}, 1).code(),
            absl::StatusCode::kInvalidArgument);  // cursor past the text
  EXPECT_EQ(forward(true, 1.0f, {}, 1, {5}).code(),
            absl::StatusCode::kInvalidArgument);  // text past copy_tokens
  EXPECT_EQ(forward(true, 1.0f, {}, 1, {5, 256}).code(),
            absl::StatusCode::kInvalidArgument);  // copy token outside the vocabulary
}

// The backend moves the copy cursor over a token only it knows yet (previous_sample), and the
// logits it returns are the model's own.
TEST(CpuBackendTest, CopyBiasAdvancesOverThePreviousStepsToken) {
  auto m = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 8});
  ASSERT_NE(m.backend, nullptr);
  const std::vector<int32_t> blocks = {0, 1};
  StepBatch prefill;
  prefill.Add(std::vector<int32_t>{5, 6, 7}, 0, blocks, true);
  StepResult first;
  ASSERT_TRUE(m.backend->Forward(prefill, &first).ok());
  const int32_t sampled = first.next_tokens[0];

  StepBatch plain;
  plain.return_logits = true;
  plain.Add(std::vector<int32_t>{sampled}, 3, blocks, true);
  StepResult unbiased;
  ASSERT_TRUE(m.backend->Forward(plain, &unbiased).ok());
  // The copy candidate after `sampled` is a token greedy decoding would not pick.
  const int32_t want = unbiased.next_tokens[0] == 11 ? 12 : 11;

  ASSERT_TRUE(m.backend->Forward(prefill, &first).ok());
  StepBatch chained;
  chained.return_logits = true;
  chained.Add(std::vector<int32_t>{0}, 3, blocks, true, /*previous_sample=*/0);
  const std::vector<int32_t> text = {sampled, want};
  chained.SetCopyBias(text, 1e4f, /*end_token=*/1, CopyCursor{}, /*advance=*/true);
  StepResult biased;
  ASSERT_TRUE(m.backend->Forward(chained, &biased).ok());
  EXPECT_EQ(biased.next_tokens, std::vector<int32_t>{want});
  EXPECT_EQ(biased.logits, unbiased.logits);
}

// A decode that takes its token from the previous step's result equals one given the token.
TEST(CpuBackendTest, PreviousSampleFeedsThePreviousStepsToken) {
  auto m = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 8});
  ASSERT_NE(m.backend, nullptr);
  const std::vector<int32_t> a = {0, 1};
  const std::vector<int32_t> b = {2, 3};
  StepBatch prefill;
  prefill.Add(std::vector<int32_t>{5, 6, 7}, 0, a, true);
  prefill.Add(std::vector<int32_t>{9, 8}, 0, b, true);
  StepResult first;
  ASSERT_TRUE(m.backend->Forward(prefill, &first).ok());
  ASSERT_EQ(first.next_tokens.size(), 2u);

  StepBatch chained;
  chained.return_logits = true;
  chained.Add(std::vector<int32_t>{0}, 2, b, true, /*previous_sample=*/1);
  chained.Add(std::vector<int32_t>{0}, 3, a, true, /*previous_sample=*/0);
  StepResult from_previous;
  ASSERT_TRUE(m.backend->Forward(chained, &from_previous).ok());

  StepBatch explicit_tokens;
  explicit_tokens.return_logits = true;
  explicit_tokens.Add(std::vector<int32_t>{first.next_tokens[1]}, 2, b, true);
  explicit_tokens.Add(std::vector<int32_t>{first.next_tokens[0]}, 3, a, true);
  StepResult given;
  ASSERT_TRUE(m.backend->Forward(explicit_tokens, &given).ok());
  EXPECT_EQ(from_previous.next_tokens, given.next_tokens);
  EXPECT_EQ(from_previous.logits, given.logits);
}

// A verify entry samples each of its last 1 + num_drafts positions as if the drafts had been
// fed one step at a time, the copy cursor advancing over each draft; more sampling rows than
// max_batch_size run in groups.
TEST(CpuBackendTest, VerifyEntrySamplesEveryDraftPosition) {
  auto m = LoadFixtureModel("ref-llama-f32",
                            {.kv_block_size = 4, .num_kv_blocks = 16, .max_batch_size = 2});
  ASSERT_NE(m.backend, nullptr);
  EXPECT_TRUE(m.backend->verifies_drafts());
  const std::vector<int32_t> tokens = {5, 6, 7, 9, 4, 12};
  const std::vector<int32_t> text = {7, 9, 4, 30};
  std::vector<std::vector<float>> expected;
  std::vector<int32_t> expected_tokens;
  CopyCursor cursor;
  for (int end = 3; end <= 6; ++end) {  // the prefixes whose last position a verify samples
    testing::BackendDriver driver(m.backend.get());
    driver.Add(std::vector<int32_t>(tokens.begin(), tokens.begin() + end));
    expected.push_back(driver.RunAll(1 << 20)[0]);
    cursor = AdvanceCopy(text, cursor, tokens[end - 1]);
    expected_tokens.push_back(BiasedArgmax(expected.back(), CopyCandidate(text, cursor, 1), 2.0f));
  }
  const std::vector<int32_t> blocks = {0, 1};
  for (bool biased : {false, true}) {
    StepBatch verify;
    verify.return_logits = true;
    // Positions 0..1 a prefill chunk, 2 the last token before the drafts 9, 4, 12.
    verify.Add(tokens, 0, blocks, true, /*previous_sample=*/-1, /*num_drafts=*/3);
    if (biased) verify.SetCopyBias(text, 2.0f, /*end_token=*/1, CopyCursor{}, /*advance=*/true);
    EXPECT_EQ(verify.num_sample_rows(), 4);
    StepResult result;
    ASSERT_TRUE(m.backend->Forward(verify, &result).ok());
    ASSERT_EQ(result.next_tokens.size(), 4u);
    const int vocab = m.backend->config().vocab_size;
    ASSERT_EQ(result.logits.size(), 4u * vocab);
    for (int r = 0; r < 4; ++r) {
      const std::vector<float> row(result.logits.begin() + r * vocab,
                                   result.logits.begin() + (r + 1) * vocab);
      EXPECT_LE(testing::RelativeError(row, expected[r]), 1e-5) << "row " << r;
      EXPECT_EQ(result.next_tokens[r], biased ? expected_tokens[r] : testing::Argmax(expected[r]))
          << "row " << r << (biased ? " biased" : "");
    }
  }
  StepBatch bad;
  bad.Add(tokens, 0, blocks, true, -1, /*num_drafts=*/6);  // no token before the drafts
  StepResult result;
  EXPECT_EQ(m.backend->Forward(bad, &result).code(), absl::StatusCode::kInvalidArgument);
  StepBatch unsampled;
  unsampled.Add(tokens, 0, blocks, false, -1, /*num_drafts=*/2);
  EXPECT_EQ(m.backend->Forward(unsampled, &result).code(), absl::StatusCode::kInvalidArgument);
}

int ProcessThreads() {
  const std::filesystem::directory_iterator tasks("/proc/self/task");
  return static_cast<int>(std::distance(begin(tasks), end(tasks)));
}

// Steps run on the engine's compute thread, not on the thread that created the backend, and
// OpenMP's thread count is per thread: there too a one-thread engine starts no thread of
// OpenMP's (whose default is one per core). One or two threads compute the same logits bit for
// bit (in f32, and in int8, whose integer sums no thread count can reorder), and sample the same
// tokens: the parts between the matmuls share a step's rows out among the threads too.
class TeamTest : public ::testing::TestWithParam<bool> {};

TEST_P(TeamTest, AStepSplitOverEngineThreadsComputesWhatOneThreadDoes) {
  const bool int8 = GetParam();
  if (int8 && !::gecd::testing::CpuHasVnni()) GTEST_SKIP() << "no VNNI here: int8 is refused";
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7, 9, 4, 12, 8, 3, 10, 11}, {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, {7, 8, 9, 10}};
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<int32_t>> sampled;
  for (int threads : {1, 2}) {
    auto checkpoint = model::Checkpoint::Open(::gecd::testing::FixturePath("models/ref-llama-f32"));
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    auto backend =
        CpuBackend::Create(**checkpoint, {.num_kv_blocks = 64, .threads = threads, .int8 = int8});
    if (!backend.ok() && int8) GTEST_SKIP() << backend.status();  // built without oneDNN
    ASSERT_TRUE(backend.ok()) << backend.status();
    const int before = ProcessThreads();
    std::vector<std::vector<float>> got;
    int started = 0;  // threads the step started; OpenMP's end with the thread that led them
    std::thread compute([&] {
      testing::BackendDriver driver(backend->get());
      for (const auto& p : prompts) driver.Add(p);
      got = driver.RunAll(/*chunk=*/1 << 20);  // one step of 26 tokens
      // As the engine runs, without logits (row by row, where oneDNN runs lm_head).
      testing::BackendDriver sampler(backend->get());
      std::vector<std::pair<int, int>> chunks;
      for (const auto& p : prompts) chunks.emplace_back(sampler.Add(p), static_cast<int>(p.size()));
      sampled.push_back(sampler.StepTokens(chunks));
      started = ProcessThreads() - before - 1;
    });
    compute.join();
    if (threads == 1) EXPECT_EQ(started, 0) << "a one-thread engine started threads";
    ASSERT_EQ(got.size(), prompts.size());
    logits.push_back(std::move(got));
  }
  EXPECT_EQ(logits[0], logits[1]);
  ASSERT_EQ(sampled[0].size(), prompts.size());
  EXPECT_EQ(sampled[0], sampled[1]);
}

INSTANTIATE_TEST_SUITE_P(Precisions, TeamTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Int8" : "F32"; });

// libgomp keeps a pool of OpenMP threads for every thread that opened a parallel region, while
// that thread lives, and once the pools' threads outnumber the CPUs it hardly spins at barriers:
// every step's parallel regions then sleep and wake (3.5x slower steps at batch 1 in the daemon,
// 2026-12-06). Create reorders the weights through oneDNN's parallel regions, and the thread
// that creates a backend (the engine's main thread) is not the one that runs its steps: it must
// keep no OpenMP thread once Create has returned.
TEST(CpuBackendTest, CreateLeavesItsCallerNoOpenMpThreads) {
  if (!::gecd::testing::CpuHasVnni()) GTEST_SKIP() << "no VNNI here: int8 is refused";
  auto checkpoint = model::Checkpoint::Open(::gecd::testing::FixturePath("models/ref-llama-f32"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int left = -1;
  // A thread of the test's own, which has never led an OpenMP team.
  std::thread caller([&] {
    const int before = ProcessThreads();
    auto backend =
        CpuBackend::Create(**checkpoint, {.num_kv_blocks = 64, .threads = 2, .int8 = true});
    if (!backend.ok()) return;  // built without oneDNN: left stays -1
    // The builder's team leaves as the builder ends, a moment after it has been joined.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ProcessThreads() != before && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    left = ProcessThreads() - before;
  });
  caller.join();
  if (left == -1) GTEST_SKIP() << "built without oneDNN";
  EXPECT_EQ(left, 0) << "threads left behind by Create";
}

// Attention reads keys block by block, with a vector kernel for 16-slot blocks and a plain
// loop for the others, and values through a kernel per head dimension (32, 64, 128) or a plain
// loop: all sum in the same order, so every block size computes the same logits to the bit.
// Prompts of 1 to 41 tokens end inside and at the edge of blocks; head dims 16 (plain values)
// and 32 (the fixed kernel).
TEST(CpuBackendTest, EveryBlockSizeComputesTheSameBits) {
  for (int head_dim : {16, 32}) {
    gecd::testing::ScopedTempDir dir;
    ASSERT_TRUE(
        gecd::testing::WriteRandomModel(
            dir.path(),
            {.hidden_size = 64, .num_heads = 4, .num_kv_heads = 2, .head_dim = head_dim, .seed = 7})
            .ok());
    std::vector<std::vector<int32_t>> prompts;
    for (int n : {1, 15, 16, 17, 33, 41}) {
      std::vector<int32_t> p;
      for (int i = 0; i < n; ++i) p.push_back(3 + (i * 37 + n) % 120);
      prompts.push_back(std::move(p));
    }
    std::vector<std::vector<std::vector<float>>> logits;
    for (int block : {16, 4, 7}) {
      auto checkpoint = model::Checkpoint::Open(dir.path());
      ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
      auto backend =
          CpuBackend::Create(**checkpoint, {.kv_block_size = block, .num_kv_blocks = 64});
      ASSERT_TRUE(backend.ok()) << backend.status();
      testing::BackendDriver driver(backend->get());
      for (const auto& p : prompts) driver.Add(p);
      logits.push_back(driver.RunAll(/*chunk=*/5));  // later chunks read the cache
    }
    EXPECT_EQ(logits[0], logits[1]) << "head_dim " << head_dim << ": blocks of 16 and 4";
    EXPECT_EQ(logits[0], logits[2]) << "head_dim " << head_dim << ": blocks of 16 and 7";
  }
}

// Issue 12: a KV cache the machine cannot hold is an error naming the key and the bytes, found
// before anything is allocated, and an allocation that fails anyway is one too, never
// std::bad_alloc.
class KvCacheSizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(gecd::testing::WriteRandomModel(dir_.path(), {}).ok());
    auto checkpoint = model::Checkpoint::Open(dir_.path());
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    checkpoint_ = std::move(*checkpoint);
    const model::ModelConfig& c = checkpoint_->config();
    block_bytes_ = int64_t{2} * c.num_hidden_layers * c.num_key_value_heads * c.head_dim *
                   CpuBackendOptions{}.kv_block_size * static_cast<int64_t>(sizeof(float));
  }

  gecd::testing::ScopedTempDir dir_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  int64_t block_bytes_ = 0;
};

TEST_F(KvCacheSizeTest, MoreBlocksThanTheMachineHoldsAreResourceExhausted) {
  const uint64_t limit = ProcessMemoryLimit().bytes;
  const uint64_t blocks = limit / static_cast<uint64_t>(block_bytes_) + 1;
  if (blocks > static_cast<uint64_t>(INT32_MAX)) GTEST_SKIP() << "memory too large to exceed";
  CpuBackendOptions options;
  options.num_kv_blocks = static_cast<int>(blocks);
  auto backend = CpuBackend::Create(*checkpoint_, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(backend.status().message(), ::testing::HasSubstr("engine.kv_cache_blocks"));
  EXPECT_THAT(backend.status().message(),
              ::testing::HasSubstr(absl::StrCat(blocks * block_bytes_, " bytes")));

  options = {};
  options.kv_cache_mb = static_cast<int>(std::min<uint64_t>((limit >> 20) + 1, INT32_MAX));
  backend = CpuBackend::Create(*checkpoint_, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(backend.status().message(), ::testing::HasSubstr("engine.kv_cache_mb"));
}

// Not under ASan or TSan: their allocators abort instead of throwing bad_alloc, and they map
// far more address space than the limit allows.
#if !defined(GECD_TESTING_SANITIZED)
// In a death-test child: under an address-space limit 256 MiB above what the process maps (as
// a container's ulimit may set), a 1 GiB KV cache fails to allocate. 0 when that is a
// ResourceExhausted error naming the key.
int CreateUnderAnAddressSpaceLimit(const model::Checkpoint& checkpoint, int64_t block_bytes) {
  std::ifstream status("/proc/self/status");
  uint64_t vm_kb = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) vm_kb = std::strtoull(line.c_str() + 7, nullptr, 10);
  }
  const rlimit limit = {(vm_kb << 10) + (256 << 20), RLIM_INFINITY};
  if (vm_kb == 0 || setrlimit(RLIMIT_AS, &limit) != 0) return 3;
  CpuBackendOptions options;
  options.num_kv_blocks = static_cast<int>((int64_t{1} << 30) / block_bytes);
  auto backend = CpuBackend::Create(checkpoint, options);
  if (backend.ok()) return 1;
  return backend.status().code() == absl::StatusCode::kResourceExhausted &&
                 absl::StrContains(backend.status().message(),
                                   "engine.kv_cache_blocks: cannot allocate")
             ? 0
             : 2;
}

TEST_F(KvCacheSizeTest, AFailedAllocationIsResourceExhaustedNotBadAlloc) {
  EXPECT_EXIT(std::_Exit(CreateUnderAnAddressSpaceLimit(*checkpoint_, block_bytes_)),
              ::testing::ExitedWithCode(0), "");
}
#endif

}  // namespace
}  // namespace gecd::engine

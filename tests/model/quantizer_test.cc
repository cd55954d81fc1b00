#include "model/quantizer.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/mapped_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "testing/random_model.h"
#include "testing/test_paths.h"

namespace gecd::model {
namespace {

using ::gecd::testing::FixturePath;
using ::gecd::testing::MakeTempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::vector<const char*> kAttention = {"self_attn.q_proj", "self_attn.k_proj",
                                             "self_attn.v_proj", "self_attn.o_proj"};
const std::vector<const char*> kMlp = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

std::unique_ptr<Checkpoint> OpenOrDie(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? *std::move(ckpt) : nullptr;
}

nlohmann::json QuantizationConfigJson(const std::string& dir) {
  auto text = ReadFileToString(dir + "/config.json");
  EXPECT_TRUE(text.ok());
  return nlohmann::json::parse(*text).at("quantization_config");
}

std::string Quantize(const std::string& in, bool attention_fp8) {
  const std::string out = MakeTempDir() + "/fp8";
  QuantizeOptions options;
  options.attention_fp8 = attention_fp8;
  size_t calls = 0, last_total = 0;
  options.on_progress = [&](size_t done, size_t total, std::string_view) {
    EXPECT_EQ(done, ++calls);
    last_total = total;
  };
  const absl::Status s = QuantizeCheckpoint(in, out, options);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, last_total);
  return out;
}

std::vector<uint8_t> Bytes(const TensorView& t) { return {t.data.begin(), t.data.end()}; }

// Same names, and per name the same dtype and shape; returns how many F8 codes and scales
// differ, out of how many.
struct Agreement {
  size_t codes = 0, codes_equal = 0, scales = 0, scales_equal = 0;
};
Agreement Compare(const Checkpoint& a, const Checkpoint& b) {
  Agreement agreement;
  EXPECT_EQ(a.TensorNames(), b.TensorNames());
  for (const std::string& name : a.TensorNames()) {
    auto ta = a.Tensor(name);
    auto tb = b.Tensor(name);
    if (!ta.ok() || !tb.ok()) continue;
    EXPECT_EQ(ta->dtype, tb->dtype) << name;
    EXPECT_EQ(ta->shape, tb->shape) << name;
    if (ta->data.size() != tb->data.size()) continue;
    const bool is_code = ta->dtype == DType::kF8E4M3, is_scale = name.ends_with(".weight_scale");
    if (!is_code && !is_scale) {
      EXPECT_EQ(Bytes(*ta), Bytes(*tb)) << name << " should be copied unchanged";
      continue;
    }
    const size_t size = DTypeSize(ta->dtype), n = ta->data.size() / size;
    size_t equal = 0;
    for (size_t i = 0; i < n; ++i) {
      equal += std::memcmp(&ta->data[i * size], &tb->data[i * size], size) == 0;
    }
    (is_code ? agreement.codes : agreement.scales) += n;
    (is_code ? agreement.codes_equal : agreement.scales_equal) += equal;
  }
  return agreement;
}

TEST(QuantizerTest, LlmCompressorFixturesLoad) {
  auto full = OpenOrDie(FixturePath("models/tiny-llama-fp8-llmcompressor"));
  ASSERT_TRUE(full);
  ASSERT_TRUE(full->config().quantization.has_value());
  EXPECT_TRUE(full->config().quantization->attention_fp8);
  EXPECT_TRUE(full->config().quantization->mlp_fp8);
  auto q = full->Linear("model.layers.1.self_attn.q_proj");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->is_fp8());
  EXPECT_EQ(q->scale->shape, (std::vector<int64_t>{64, 1}));

  auto mlp_only = OpenOrDie(FixturePath("models/tiny-llama-fp8-mlp-only-llmcompressor"));
  ASSERT_TRUE(mlp_only);
  EXPECT_FALSE(mlp_only->config().quantization->attention_fp8);
  EXPECT_TRUE(mlp_only->config().quantization->mlp_fp8);
  EXPECT_FALSE(mlp_only->Linear("model.layers.0.self_attn.o_proj")->is_fp8());
  EXPECT_TRUE(mlp_only->Linear("model.layers.0.mlp.down_proj")->is_fp8());
}

// gecd quantize and llmcompressor's FP8_DYNAMIC on the same bf16 model give the same checkpoint:
// names, dtypes, shapes, quantization_config, and (observed) every FP8 code and scale.
TEST(QuantizerTest, MatchesLlmCompressor) {
  const std::string bf16 = FixturePath("models/tiny-llama-bf16");
  struct Case {
    bool attention_fp8;
    const char* reference;
  };
  for (const Case& c : {Case{true, "models/tiny-llama-fp8-llmcompressor"},
                        Case{false, "models/tiny-llama-fp8-mlp-only-llmcompressor"}}) {
    SCOPED_TRACE(c.reference);
    const std::string out = Quantize(bf16, c.attention_fp8);
    EXPECT_EQ(QuantizationConfigJson(out), QuantizationConfigJson(FixturePath(c.reference)));
    auto ours = OpenOrDie(out);
    auto theirs = OpenOrDie(FixturePath(c.reference));
    ASSERT_TRUE(ours && theirs);
    const Agreement a = Compare(*ours, *theirs);
    EXPECT_GT(a.codes, 0u);
    EXPECT_EQ(a.codes_equal, a.codes) << "FP8 codes differing from llmcompressor";
    EXPECT_EQ(a.scales_equal, a.scales) << "scales differing from llmcompressor";
    EXPECT_TRUE(fs::exists(out + "/generation_config.json"));
  }
}

TEST(QuantizerTest, NoAttentionFp8KeepsProjectionsInOriginalDtype) {
  const std::string bf16 = FixturePath("models/tiny-llama-bf16");
  const std::string out = Quantize(bf16, /*attention_fp8=*/false);
  auto in = OpenOrDie(bf16);
  auto q = OpenOrDie(out);
  ASSERT_TRUE(in && q);
  EXPECT_FALSE(q->config().quantization->attention_fp8);
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* m : kAttention) {
      const std::string module = "model.layers." + std::to_string(layer) + "." + m;
      auto w = q->Linear(module);
      ASSERT_TRUE(w.ok());
      EXPECT_FALSE(w->is_fp8()) << module;
      EXPECT_EQ(w->weight.dtype, DType::kBF16);
      EXPECT_EQ(Bytes(w->weight), Bytes(in->Linear(module)->weight)) << module;
    }
    for (const char* m : kMlp) {
      EXPECT_TRUE(q->Linear("model.layers." + std::to_string(layer) + "." + m)->is_fp8());
    }
  }
}

// With rows whose magnitudes differ (the fixture's spread by e^N(0,1)), one scale per row is
// more accurate than one per matrix. e4m3 is a float format, so the gain per matrix is small and
// noisy; over the model it is clear, and no matrix gets meaningfully worse.
TEST(QuantizerTest, PerChannelErrorBelowPerTensor) {
  auto ckpt = OpenOrDie(FixturePath("models/tiny-llama-bf16"));
  ASSERT_TRUE(ckpt);
  double sum_channel = 0.0, sum_tensor = 0.0;
  for (int layer = 0; layer < 2; ++layer) {
    for (const std::vector<const char*>& family : {kAttention, kMlp}) {
      for (const char* m : family) {
        const std::string module = "model.layers." + std::to_string(layer) + "." + m;
        const TensorView w = ckpt->Linear(module)->weight;
        const Fp8Error e = MeasureFp8Error(ToFloat(w), w.shape[0], w.shape[1]);
        // e4m3 keeps 3 mantissa bits: a relative RMS error of a few percent.
        EXPECT_GT(e.per_channel, 0.005) << module;
        EXPECT_LT(e.per_channel, 0.05) << module;
        EXPECT_LT(e.per_channel, e.per_tensor * 1.01) << module;
        sum_channel += e.per_channel;
        sum_tensor += e.per_tensor;
      }
    }
  }
  EXPECT_LT(sum_channel, sum_tensor * 0.98);
}

TEST(QuantizerTest, Fp8ErrorOfExactlyRepresentableRowsIsZero) {
  // Rows whose values are e4m3 numbers times a power of two are exact per channel, but one
  // scale for both rows (1000x apart) flushes the small row's values.
  const std::vector<float> w = {448.0f, -224.0f, 1.0f, 0.5f, 0.448f, -0.224f, 0.001f, 0.0005f};
  const Fp8Error e = MeasureFp8Error(w, 2, 4);
  EXPECT_LT(e.per_channel, 1e-6);
  EXPECT_GT(e.per_tensor, 0.0);
  const Fp8Error zero = MeasureFp8Error(std::vector<float>(8, 0.0f), 2, 4);
  EXPECT_EQ(zero.per_channel, 0.0);
  EXPECT_EQ(zero.per_tensor, 0.0);
}

TEST(QuantizerTest, ShardedF32Qwen2RoundTrips) {
  gecd::testing::RandomModelOptions o;
  o.architecture = Architecture::kQwen2;
  o.num_shards = 2;
  o.seed = 3;
  const std::string in_dir = MakeTempDir();
  ASSERT_TRUE(gecd::testing::WriteRandomModel(in_dir, o).ok());
  const std::string out = Quantize(in_dir, /*attention_fp8=*/true);
  EXPECT_TRUE(fs::exists(out + "/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  auto in = OpenOrDie(in_dir);
  auto q = OpenOrDie(out);
  ASSERT_TRUE(in && q);
  auto k = q->Linear("model.layers.1.self_attn.k_proj");
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(k->is_fp8());
  EXPECT_EQ(k->scale->dtype, DType::kF32);
  ASSERT_TRUE(k->bias.has_value());
  EXPECT_EQ(Bytes(*k->bias), Bytes(*in->Linear("model.layers.1.self_attn.k_proj")->bias));
  // Dequantized weights sit within half an e4m3 step (1/16 relative, or the subnormal step) of
  // the originals.
  const std::vector<float> original =
      ToFloat(in->Linear("model.layers.1.self_attn.k_proj")->weight);
  const std::vector<float> codes = ToFloat(k->weight), scales = ToFloat(*k->scale);
  const size_t cols = k->weight.shape[1];
  for (size_t i = 0; i < original.size(); ++i) {
    const float scale = scales[i / cols];
    EXPECT_NEAR(codes[i] * scale, original[i],
                std::max(std::fabs(original[i]) / 16.0f, scale / 1024.0f) * 1.0001f)
        << i;
  }
  // The untouched embeddings are byte-identical.
  EXPECT_EQ(Bytes(*q->Tensor("model.embed_tokens.weight")),
            Bytes(*in->Tensor("model.embed_tokens.weight")));
}

TEST(QuantizerTest, RefusesQuantizedInputAndInPlaceOutput) {
  const std::string fp8 = FixturePath("models/tiny-llama-fp8-llmcompressor");
  absl::Status s = QuantizeCheckpoint(fp8, MakeTempDir() + "/o", {});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("already quantized"));
  const std::string bf16 = FixturePath("models/tiny-llama-bf16");
  s = QuantizeCheckpoint(bf16, bf16, {});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("must differ"));
}

TEST(QuantizerTest, RefusesNonEmptyOutputUnlessOverwriting) {
  const std::string bf16 = FixturePath("models/tiny-llama-bf16");
  const std::string out = MakeTempDir();
  std::ofstream(out + "/notes.txt") << "keep me";
  absl::Status s = QuantizeCheckpoint(bf16, out, {});
  ASSERT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_FALSE(std::filesystem::exists(out + "/config.json"));
  QuantizeOptions overwrite;
  overwrite.overwrite = true;
  ASSERT_TRUE(QuantizeCheckpoint(bf16, out, overwrite).ok());
  EXPECT_TRUE(std::filesystem::exists(out + "/config.json"));
}

}  // namespace
}  // namespace gecd::model

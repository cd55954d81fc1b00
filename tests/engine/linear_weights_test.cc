// The host side of the cuda backend's weight loading, on the reference checkpoints: what a
// GPU start-up quantizes, and that a pre-quantized FP8 checkpoint is used as stored.
#include "engine/linear_weights.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/numerics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "testing/test_paths.h"

namespace gecd::engine {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<model::Checkpoint> Open(const std::string& name) {
  absl::StatusOr<std::unique_ptr<model::Checkpoint>> c =
      model::Checkpoint::Open(testing::FixturePath("models/" + name));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

const std::vector<std::string> kQkv = {"model.layers.1.self_attn.q_proj",
                                       "model.layers.1.self_attn.k_proj",
                                       "model.layers.1.self_attn.v_proj"};
// ref-llama: hidden 64, 4 heads and 2 KV heads of 16: q 64 rows, k and v 32 each.
constexpr int64_t kHidden = 64, kQkvRows = 128;

TEST(LinearWeightsTest, AFloatCheckpointIsQuantizedPerOutputChannel) {
  std::unique_ptr<model::Checkpoint> bf16 = Open("ref-llama-bf16");
  ASSERT_NE(bf16, nullptr);
  absl::StatusOr<HostLinear> l = PrepareLinear(*bf16, kQkv, kQkvRows, kHidden, true, false);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->fp8);
  EXPECT_EQ(l->rows_quantized, kQkvRows);
  ASSERT_EQ(l->codes.size(), static_cast<size_t>(kQkvRows * kHidden));
  ASSERT_EQ(l->scales.size(), static_cast<size_t>(kQkvRows));
  EXPECT_TRUE(l->bf16.empty());
  EXPECT_TRUE(l->bias.empty());
  // The k_proj rows follow q's, quantized by the CPU backend's rule.
  absl::StatusOr<model::LinearWeight> k = bf16->Linear(kQkv[1]);
  ASSERT_TRUE(k.ok());
  const std::vector<float> f = model::ToFloat(k->weight);
  std::vector<uint8_t> codes(f.size());
  std::vector<float> scales(32);
  QuantizeRowsE4m3Codes(f.data(), 32, kHidden, codes.data(), scales.data());
  EXPECT_EQ(std::vector<uint8_t>(l->codes.begin() + 64 * kHidden, l->codes.begin() + 96 * kHidden),
            codes);
  EXPECT_EQ(std::vector<float>(l->scales.begin() + 64, l->scales.begin() + 96), scales);
}

TEST(LinearWeightsTest, APreQuantizedCheckpointIsUsedAsStoredWithoutQuantizing) {
  std::unique_ptr<model::Checkpoint> fp8 = Open("ref-llama-fp8");
  ASSERT_NE(fp8, nullptr);
  absl::StatusOr<HostLinear> l = PrepareLinear(*fp8, kQkv, kQkvRows, kHidden, true, false);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->rows_quantized, 0);
  std::vector<uint8_t> stored;
  std::vector<float> stored_scales;
  for (const std::string& m : kQkv) {
    absl::StatusOr<model::LinearWeight> w = fp8->Linear(m);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->is_fp8()) << m;
    stored.insert(stored.end(), w->weight.data.begin(), w->weight.data.end());
    const std::vector<float> s = model::ToFloat(*w->scale);
    stored_scales.insert(stored_scales.end(), s.begin(), s.end());
  }
  EXPECT_EQ(l->codes, stored);
  EXPECT_EQ(l->scales, stored_scales);
}

TEST(LinearWeightsTest, Bf16OfAnFp8CheckpointIsDequantized) {
  std::unique_ptr<model::Checkpoint> fp8 = Open("ref-llama-fp8");
  ASSERT_NE(fp8, nullptr);
  const std::vector<std::string> down = {"model.layers.0.mlp.down_proj"};
  absl::StatusOr<HostLinear> l = PrepareLinear(*fp8, down, kHidden, 128, false, false);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_FALSE(l->fp8);
  EXPECT_EQ(l->rows_quantized, 0);
  absl::StatusOr<model::LinearWeight> w = fp8->Linear(down[0]);
  ASSERT_TRUE(w.ok());
  const std::vector<float> codes = model::ToFloat(w->weight);
  const std::vector<float> scales = model::ToFloat(*w->scale);
  ASSERT_EQ(l->bf16.size(), codes.size());
  for (size_t i : {size_t{0}, size_t{129}, codes.size() - 1}) {
    EXPECT_EQ(l->bf16[i], FloatToBf16(codes[i] * scales[i / 128])) << i;
  }
}

TEST(LinearWeightsTest, PerTensorQuantizesTheFusedMatrixWithOneScale) {
  std::unique_ptr<model::Checkpoint> fp8 = Open("ref-llama-fp8");
  ASSERT_NE(fp8, nullptr);
  absl::StatusOr<HostLinear> l = PrepareLinear(*fp8, kQkv, kQkvRows, kHidden, true, true);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->scales.size(), 1u);
  EXPECT_EQ(l->codes.size(), static_cast<size_t>(kQkvRows * kHidden));
  EXPECT_EQ(l->rows_quantized, kQkvRows);
}

TEST(LinearWeightsTest, ShapeErrorsNameTheModule) {
  std::unique_ptr<model::Checkpoint> bf16 = Open("ref-llama-bf16");
  ASSERT_NE(bf16, nullptr);
  absl::StatusOr<HostLinear> rows = PrepareLinear(*bf16, kQkv, kQkvRows + 8, kHidden, true, false);
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(rows.status().message(), HasSubstr("q_proj: expected 136 output rows, got 128"));
  absl::StatusOr<HostLinear> in = PrepareLinear(*bf16, kQkv, kQkvRows, kHidden * 2, true, false);
  ASSERT_FALSE(in.ok());
  EXPECT_THAT(in.status().message(), HasSubstr("q_proj: weight is not [*, 128]"));
  absl::StatusOr<HostLinear> missing =
      PrepareLinear(*bf16, {"model.layers.9.mlp.down_proj"}, kHidden, 128, true, false);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("model.layers.9.mlp.down_proj"));
}

}  // namespace
}  // namespace gecd::engine

#include "model/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/json_fields.h"
#include "testing/random_model.h"
#include "testing/test_paths.h"

namespace gecd::model {
namespace {

using ::gecd::testing::MakeTempDir;
using ::gecd::testing::RandomModelOptions;
using ::gecd::testing::WriteRandomModel;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

std::string WriteModel(const RandomModelOptions& o) {
  std::string dir = MakeTempDir();
  EXPECT_TRUE(WriteRandomModel(dir, o).ok());
  return dir;
}

// Rewrites the JSON file at `path` through `edit`.
void EditJson(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  ASSERT_TRUE(WriteJsonFile(path, j).ok());
}

TEST(CheckpointTest, ShardedAndSingleFileHoldIdenticalTensors) {
  RandomModelOptions o;
  o.seed = 7;
  o.dtype = DType::kBF16;
  const std::string single = WriteModel(o);
  o.num_shards = 3;
  const std::string sharded = WriteModel(o);
  ASSERT_TRUE(fs::exists(sharded + "/model-00003-of-00003.safetensors"));
  ASSERT_TRUE(fs::exists(sharded + "/model.safetensors.index.json"));

  auto a = Checkpoint::Open(single);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Checkpoint::Open(sharded);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*a)->TensorNames(), (*b)->TensorNames());
  std::set<std::string> files;
  for (const std::string& name : (*a)->TensorNames()) {
    auto ta = (*a)->Tensor(name);
    auto tb = (*b)->Tensor(name);
    ASSERT_TRUE(ta.ok() && tb.ok()) << name;
    EXPECT_EQ(ta->dtype, tb->dtype) << name;
    EXPECT_EQ(ta->shape, tb->shape) << name;
    EXPECT_TRUE(std::equal(ta->data.begin(), ta->data.end(), tb->data.begin(), tb->data.end()))
        << name;
    files.insert(tb->file);
  }
  EXPECT_EQ(files.size(), 3u);
}

TEST(CheckpointTest, ExposesConfigAndLinears) {
  RandomModelOptions o;
  o.architecture = Architecture::kQwen2;
  o.tie_word_embeddings = true;
  o.llama3_rope_scaling = true;
  o.dtype = DType::kF16;
  auto ckpt = Checkpoint::Open(WriteModel(o));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const ModelConfig& c = (*ckpt)->config();
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ((*ckpt)->generation_config().eos_token_ids, std::vector<int>{2});
  EXPECT_FALSE((*ckpt)->Tensor("lm_head.weight").ok());

  auto k = (*ckpt)->Linear("model.layers.1.self_attn.k_proj");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE(k->is_fp8());
  ASSERT_TRUE(k->bias.has_value());
  EXPECT_EQ(k->weight.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(k->bias->shape, std::vector<int64_t>{16});
  EXPECT_EQ(k->weight.dtype, DType::kF16);
  auto o_proj = (*ckpt)->Linear("model.layers.1.self_attn.o_proj");
  ASSERT_TRUE(o_proj.ok());
  EXPECT_FALSE(o_proj->bias.has_value());
}

TEST(CheckpointTest, ToFloatAndFromFloatRoundTripEveryDtype) {
  const std::vector<float> values = {0.0f, 1.0f, -2.5f, 0.15625f, 100.0f};
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    TensorView t;
    std::vector<uint8_t> bytes = FromFloat(values, d);
    ASSERT_EQ(bytes.size(), values.size() * DTypeSize(d));
    t.dtype = d;
    t.shape = {5};
    t.data = bytes;
    std::vector<float> back = ToFloat(t);
    // Every value above is exact in every format except 100 in e4m3 (96 or 104 apart).
    for (size_t i = 0; i + 1 < values.size(); ++i) EXPECT_EQ(back[i], values[i]) << i;
    EXPECT_NEAR(back[4], 100.0f, d == DType::kF8E4M3 ? 4.0f : 0.0f);
  }
}

TEST(CheckpointTest, MissingTensorNamesIt) {
  RandomModelOptions o;
  const std::string dir = WriteModel(o);
  // Drop one tensor by rewriting the file without it.
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  SafetensorsWriter w;
  for (const std::string& name : (*file)->TensorNames()) {
    if (name == "model.layers.1.mlp.up_proj.weight") continue;
    auto t = (*file)->Get(name);
    w.Add(name, t->dtype, t->shape, std::vector<uint8_t>(t->data.begin(), t->data.end()));
  }
  file->reset();
  ASSERT_TRUE(w.Write(dir + "/model.safetensors").ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("model.layers.1.mlp.up_proj.weight"));
  EXPECT_THAT(Message(ckpt.status()), HasSubstr(dir));
}

TEST(CheckpointTest, WrongShapeNamesFileAndTensor) {
  RandomModelOptions o;
  const std::string dir = WriteModel(o);
  EditJson(dir + "/config.json", [](nlohmann::json& j) { j["intermediate_size"] = 96; });
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("model.safetensors"));
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("mlp.gate_proj.weight"));
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("[64, 32], expected [96, 32]"));
}

TEST(CheckpointTest, MissingBiasWhenConfigAsksForIt) {
  RandomModelOptions o;
  const std::string dir = WriteModel(o);
  EditJson(dir + "/config.json", [](nlohmann::json& j) { j["attention_bias"] = true; });
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("model.layers.0.self_attn.q_proj.bias"));
}

TEST(CheckpointTest, IndexErrors) {
  RandomModelOptions o;
  o.num_shards = 2;
  {
    const std::string dir = WriteModel(o);
    fs::remove(dir + "/model-00002-of-00002.safetensors");
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_THAT(Message(ckpt.status()), HasSubstr("model-00002-of-00002.safetensors"));
    EXPECT_THAT(Message(ckpt.status()), HasSubstr("model.safetensors.index.json"));
  }
  // Opens a fresh two-shard model whose index maps model.norm.weight to `shard`.
  const auto open_with_norm_in = [&o](const std::string& shard) {
    const std::string dir = WriteModel(o);
    EditJson(dir + "/model.safetensors.index.json",
             [&shard](nlohmann::json& j) { j["weight_map"]["model.norm.weight"] = shard; });
    return Checkpoint::Open(dir);
  };
  auto wrong_shard = open_with_norm_in("model-00001-of-00002.safetensors");
  ASSERT_FALSE(wrong_shard.ok());
  EXPECT_THAT(Message(wrong_shard.status()), HasSubstr("weight_map.model.norm.weight"));
  // A shard outside the model directory is refused even though the file exists.
  EXPECT_FALSE(open_with_norm_in("../model-00002-of-00002.safetensors").ok());
}

TEST(CheckpointTest, NoWeightsOrNoConfig) {
  const std::string empty = MakeTempDir();
  auto ckpt = Checkpoint::Open(empty);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("config.json"));
  RandomModelOptions o;
  const std::string dir = WriteModel(o);
  fs::remove(dir + "/model.safetensors");
  ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(Message(ckpt.status()), HasSubstr("model.safetensors"));
}

TEST(CheckpointTest, BenchmarkShapeIsAboutTenMillionParameters) {
  auto ckpt = Checkpoint::Open(WriteModel(testing::BenchmarkModelOptions()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const long long params = ParameterCount((*ckpt)->config());
  EXPECT_GT(params, 8'000'000);
  EXPECT_LT(params, 12'000'000);
  long long stored = 0;
  for (const std::string& name : (*ckpt)->TensorNames())
    stored += (*ckpt)->Tensor(name)->num_elements();
  EXPECT_EQ(stored, params);
}

}  // namespace
}  // namespace gecd::model

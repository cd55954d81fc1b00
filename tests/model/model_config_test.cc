#include "model/model_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gecd::model {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json LlamaJson() {
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", 1000},
      {"hidden_size", 64},
      {"intermediate_size", 128},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"max_position_embeddings", 512},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 500000.0},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
}

// FP8_DYNAMIC as llmcompressor 0.14 writes it.
json Fp8Quantization(json ignore) {
  json args_w = {{"num_bits", 8},       {"type", "float"},     {"strategy", "channel"},
                 {"symmetric", true},   {"dynamic", false},    {"group_size", nullptr},
                 {"actorder", nullptr}, {"observer", "minmax"}};
  json args_a = {{"num_bits", 8},
                 {"type", "float"},
                 {"strategy", "token"},
                 {"symmetric", true},
                 {"dynamic", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", json::object()},
          {"ignore", ignore},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", args_w},
              {"input_activations", args_a},
              {"output_activations", nullptr},
              {"format", "float-quantized"}}}}}};
}

absl::StatusOr<ModelConfig> Parse(const json& j) {
  return ParseModelConfig(j.dump(), "m/config.json");
}

TEST(ModelConfigTest, ParsesLlama) {
  auto c = Parse(LlamaJson());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c->vocab_size, 1000);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{2});
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_TRUE(c->rope_scaling.type.empty());
  EXPECT_FALSE(c->quantization.has_value());
}

TEST(ModelConfigTest, DefaultsKvHeadsToHeadsAndReadsExplicitHeadDim) {
  json j = LlamaJson();
  j.erase("num_key_value_heads");
  j["head_dim"] = 32;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 32);
}

TEST(ModelConfigTest, Qwen2AlwaysHasAttentionBiasAndListEos) {
  json j = LlamaJson();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j["eos_token_id"] = {151643, 151645};
  j["tie_word_embeddings"] = true;
  j.erase("torch_dtype");
  j["dtype"] = "float32";  // transformers 5 spelling
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen2);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{151643, 151645}));
  EXPECT_EQ(c->torch_dtype, "float32");
}

TEST(ModelConfigTest, MistralByModelTypeAlone) {
  json j = LlamaJson();
  j.erase("architectures");
  j["model_type"] = "mistral";
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMistral);
  EXPECT_EQ(c->architecture_name, "MistralForCausalLM");
}

TEST(ModelConfigTest, Llama3RopeScalingInBothLayouts) {
  json scaling = {{"rope_type", "llama3"},
                  {"factor", 32.0},
                  {"low_freq_factor", 1.0},
                  {"high_freq_factor", 4.0},
                  {"original_max_position_embeddings", 8192}};
  json v4 = LlamaJson();
  v4["rope_scaling"] = scaling;
  json v5 = LlamaJson();
  v5.erase("rope_theta");
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  for (const json& j : {v4, v5}) {
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling.type, "llama3");
    EXPECT_FLOAT_EQ(c->rope_scaling.factor, 32.0f);
    EXPECT_FLOAT_EQ(c->rope_scaling.high_freq_factor, 4.0f);
    EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  }
}

TEST(ModelConfigTest, DefaultRopeTypeMeansNoScaling) {
  json j = LlamaJson();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->rope_scaling.type.empty());
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
}

struct BadCase {
  const char* name;
  void (*mutate)(json&);
  const char* expected;  // substring of the error
};

class ModelConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelConfigErrorTest, NamesTheKey) {
  json j = LlamaJson();
  GetParam().mutate(j);
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("m/config.json"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    All, ModelConfigErrorTest,
    ::testing::Values(
        BadCase{"UnknownArch", [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; },
                "GPT2LMHeadModel"},
        BadCase{"MissingHidden", [](json& j) { j.erase("hidden_size"); }, "hidden_size: missing"},
        BadCase{"StringVocab", [](json& j) { j["vocab_size"] = "1000"; }, "vocab_size"},
        BadCase{"NegativeLayers", [](json& j) { j["num_hidden_layers"] = -1; },
                "num_hidden_layers"},
        BadCase{"HugeDim", [](json& j) { j["intermediate_size"] = 1LL << 40; },
                "intermediate_size"},
        BadCase{"KvNotDividing", [](json& j) { j["num_key_value_heads"] = 3; },
                "num_key_value_heads"},
        BadCase{"OddHeadDim", [](json& j) { j["head_dim"] = 15; }, "head_dim"},
        BadCase{"YarnRope",
                [](json& j) {
                  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
                },
                "rope_scaling.type"},
        BadCase{"LinearRopeV5",
                [](json& j) {
                  j["rope_parameters"] = {{"rope_type", "linear"}};
                },
                "rope_parameters.rope_type"},
        BadCase{"BadTheta", [](json& j) { j["rope_theta"] = -1.0; }, "rope_theta"},
        BadCase{"Fp64", [](json& j) { j["torch_dtype"] = "float64"; }, "torch_dtype"},
        BadCase{"Gelu", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
        BadCase{"EosList",
                [](json& j) {
                  j["eos_token_id"] = {2, "x"};
                },
                "eos_token_id[1]"},
        BadCase{"Gptq",
                [](json& j) {
                  j["quantization_config"] = {{"quant_method", "gptq"}};
                },
                "quantization_config.quant_method"},
        BadCase{"Int8Weights",
                [](json& j) {
                  j["quantization_config"] = Fp8Quantization({"lm_head"});
                  j["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int";
                },
                "quantization_config.config_groups.group_0.weights.type"},
        BadCase{"TensorStrategy",
                [](json& j) {
                  j["quantization_config"] = Fp8Quantization({"lm_head"});
                  j["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] =
                      "tensor";
                },
                "weights.strategy"},
        BadCase{
            "StaticActivations",
            [](json& j) {
              j["quantization_config"] = Fp8Quantization({"lm_head"});
              j["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] =
                  false;
            },
            "input_activations.dynamic"},
        BadCase{"PackedFormat",
                [](json& j) {
                  j["quantization_config"] = Fp8Quantization({"lm_head"});
                  j["quantization_config"]["format"] = "pack-quantized";
                },
                "quantization_config.format"},
        BadCase{"LmHeadQuantized",
                [](json& j) { j["quantization_config"] = Fp8Quantization(json::array()); },
                "lm_head"},
        BadCase{"PartialAttention",
                [](json& j) {
                  j["quantization_config"] =
                      Fp8Quantization({"lm_head", "model.layers.0.self_attn.q_proj"});
                },
                "quantization_config.ignore"},
        BadCase{"BadRegex",
                [](json& j) {
                  j["quantization_config"] = Fp8Quantization({"lm_head", "re:(("});
                },
                "quantization_config.ignore[1]"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ModelConfigTest, Fp8DerivesFamiliesFromIgnore) {
  json all = LlamaJson();
  all["quantization_config"] = Fp8Quantization({"lm_head"});
  auto c = Parse(all);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->quantization.has_value());
  EXPECT_TRUE(c->quantization->attention_fp8);
  EXPECT_TRUE(c->quantization->mlp_fp8);
  EXPECT_EQ(c->quantization->ignore, std::vector<std::string>{"lm_head"});

  json regex = LlamaJson();
  regex["quantization_config"] = Fp8Quantization({"lm_head", "re:.*self_attn.*"});
  c = Parse(regex);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->quantization->attention_fp8);
  EXPECT_TRUE(c->quantization->mlp_fp8);

  // Names as llmcompressor expands them, and a regex anchored at the start like re.match.
  json names = LlamaJson();
  names["quantization_config"] =
      Fp8Quantization({"re:lm_", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
                       "model.layers.0.mlp.down_proj", "re:model\\.layers\\.1\\.mlp"});
  c = Parse(names);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->quantization->attention_fp8);
  EXPECT_FALSE(c->quantization->mlp_fp8);

  // "mlp" is not at the start of any name, so re.match semantics quantize everything but
  // lm_head.
  json unanchored = LlamaJson();
  unanchored["quantization_config"] = Fp8Quantization({"lm_head", "re:mlp"});
  c = Parse(unanchored);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->quantization->mlp_fp8);
}

TEST(ModelConfigTest, RejectsNonJsonAndNonObject) {
  for (const char* text : {"", "{", "[1,2]", "{\"a\": }", "null"}) {
    auto c = ParseModelConfig(text, "x/config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("x/config.json"));
  }
}

TEST(ModelConfigTest, ParameterCountMatchesHandCount) {
  json j = LlamaJson();
  auto c = Parse(j);
  ASSERT_TRUE(c.ok());
  // embed 1000*64; per layer q 64*64, k,v 64*32 each, o 64*64, mlp 3*64*128, norms 2*64;
  // final norm 64; untied lm_head 1000*64.
  const long long layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64;
  EXPECT_EQ(ParameterCount(*c), 1000 * 64 + 2 * layer + 64 + 1000 * 64);
  j["tie_word_embeddings"] = true;
  j["architectures"] = {"Qwen2ForCausalLM"};
  c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ParameterCount(*c), 1000 * 64 + 2 * (layer + 64 + 2 * 32) + 64);
}

TEST(GenerationConfigTest, ParsesIdsAndMaxNewTokens) {
  auto g = ParseGenerationConfig(
      R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009], "max_new_tokens": 64,
          "do_sample": true})",
      "g.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->bos_token_id, 128000);
  EXPECT_EQ(g->eos_token_ids, (std::vector<int>{128001, 128009}));
  EXPECT_EQ(g->max_new_tokens, 64);
  auto bad = ParseGenerationConfig(R"({"eos_token_id": -3})", "g.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("eos_token_id"));
}

}  // namespace
}  // namespace gecd::model

#include "testing/random_model.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/json_fields.h"

namespace gecd::testing {
namespace {

using model::Architecture;
using model::DType;
using nlohmann::json;

// Box-Muller over mt19937_64, so the weights do not depend on the standard library's
// normal_distribution.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : engine_(seed) {}
  float Next() {
    const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

 private:
  std::mt19937_64 engine_;
};

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

const char* ClassName(Architecture a) {
  switch (a) {
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
    case Architecture::kMistral:
      return "MistralForCausalLM";
  }
  return "";
}

const char* ModelType(Architecture a) {
  switch (a) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kMistral:
      return "mistral";
  }
  return "";
}

const char* TorchDtype(DType d) {
  switch (d) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    default:
      return "float32";
  }
}

std::vector<NamedTensor> MakeTensors(const RandomModelOptions& o, int head_dim) {
  Gaussian rng(o.seed);
  std::vector<NamedTensor> tensors;
  // Rows of a Linear get magnitudes spread over about e^±1 around 1/sqrt(in).
  auto linear = [&](std::string name, int64_t out, int64_t in) {
    NamedTensor t{std::move(name), {out, in}, std::vector<float>(out * in)};
    for (int64_t r = 0; r < out; ++r) {
      const float row_scale = std::exp(0.5f * rng.Next()) / std::sqrt(static_cast<float>(in));
      for (int64_t c = 0; c < in; ++c) t.values[r * in + c] = row_scale * rng.Next();
    }
    tensors.push_back(std::move(t));
  };
  auto vector = [&](std::string name, int64_t n, float center, float spread) {
    NamedTensor t{std::move(name), {n}, std::vector<float>(n)};
    for (float& v : t.values) v = center + spread * rng.Next();
    tensors.push_back(std::move(t));
  };
  const int64_t h = o.hidden_size, q = int64_t{o.num_heads} * head_dim,
                kv = int64_t{o.num_kv_heads} * head_dim;
  const bool bias = o.architecture == Architecture::kQwen2;
  {
    NamedTensor embed{"model.embed_tokens.weight",
                      {o.vocab_size, h},
                      std::vector<float>(int64_t{o.vocab_size} * h)};
    for (float& v : embed.values) v = rng.Next();
    tensors.push_back(std::move(embed));
  }
  for (int i = 0; i < o.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    vector(p + "input_layernorm.weight", h, 1.0f, 0.1f);
    linear(p + "self_attn.q_proj.weight", q, h);
    linear(p + "self_attn.k_proj.weight", kv, h);
    linear(p + "self_attn.v_proj.weight", kv, h);
    if (bias) {
      vector(p + "self_attn.q_proj.bias", q, 0.0f, 0.1f);
      vector(p + "self_attn.k_proj.bias", kv, 0.0f, 0.1f);
      vector(p + "self_attn.v_proj.bias", kv, 0.0f, 0.1f);
    }
    linear(p + "self_attn.o_proj.weight", h, q);
    vector(p + "post_attention_layernorm.weight", h, 1.0f, 0.1f);
    linear(p + "mlp.gate_proj.weight", o.intermediate_size, h);
    linear(p + "mlp.up_proj.weight", o.intermediate_size, h);
    linear(p + "mlp.down_proj.weight", h, o.intermediate_size);
  }
  vector("model.norm.weight", h, 1.0f, 0.1f);
  if (!o.tie_word_embeddings) linear("lm_head.weight", o.vocab_size, h);
  return tensors;
}

json MakeConfig(const RandomModelOptions& o) {
  json c = {
      {"architectures", {ClassName(o.architecture)}},
      {"model_type", ModelType(o.architecture)},
      {"vocab_size", o.vocab_size},
      {"hidden_size", o.hidden_size},
      {"intermediate_size", o.intermediate_size},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", o.rope_theta},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", o.tie_word_embeddings},
      {"torch_dtype", TorchDtype(o.dtype)},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
  if (o.head_dim != 0) c["head_dim"] = o.head_dim;
  if (o.architecture == Architecture::kLlama) c["attention_bias"] = false;
  if (o.llama3_rope_scaling) {
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", o.max_position_embeddings / 4}};
  }
  return c;
}

}  // namespace

RandomModelOptions BenchmarkModelOptions() {
  RandomModelOptions o;
  o.vocab_size = 8000;
  o.hidden_size = 256;
  o.intermediate_size = 768;
  o.num_layers = 6;
  o.num_heads = 8;
  o.num_kv_heads = 4;
  o.max_position_embeddings = 2048;
  o.dtype = DType::kBF16;
  return o;
}

absl::Status WriteRandomModel(const std::string& dir, const RandomModelOptions& options) {
  if (options.dtype == DType::kF8E4M3 || options.num_shards < 1 || options.num_heads < 1 ||
      options.num_kv_heads < 1) {
    return absl::InvalidArgumentError("WriteRandomModel: bad options");
  }
  const int head_dim =
      options.head_dim != 0 ? options.head_dim : options.hidden_size / options.num_heads;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  const std::filesystem::path root(dir);
  RETURN_IF_ERROR(model::WriteJsonFile((root / "config.json").string(), MakeConfig(options)));
  RETURN_IF_ERROR(model::WriteJsonFile((root / "generation_config.json").string(),
                                       {{"bos_token_id", 1}, {"eos_token_id", 2}}));

  std::vector<NamedTensor> tensors = MakeTensors(options, head_dim);
  const size_t shards = options.num_shards;
  auto shard_file = [shards](size_t s) -> std::string {
    return shards == 1 ? "model.safetensors"
                       : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
  };
  std::vector<model::SafetensorsWriter> writers(shards);
  json weight_map = json::object();
  uint64_t total_size = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t shard = i * shards / tensors.size();  // contiguous runs, like HF's sharding
    std::vector<uint8_t> bytes = model::FromFloat(tensors[i].values, options.dtype);
    total_size += bytes.size();
    weight_map[tensors[i].name] = shard_file(shard);
    writers[shard].Add(tensors[i].name, options.dtype, tensors[i].shape, std::move(bytes));
  }
  for (size_t s = 0; s < shards; ++s) {
    writers[s].SetMetadata("format", "pt");
    RETURN_IF_ERROR(writers[s].Write((root / shard_file(s)).string()));
  }
  if (shards > 1) {
    RETURN_IF_ERROR(model::WriteJsonFile(
        (root / "model.safetensors.index.json").string(),
        {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}}));
  }
  return absl::OkStatus();
}

}  // namespace gecd::testing

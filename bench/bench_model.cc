#include "bench_model.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/numerics.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"

namespace gecd {

Shape ShapeFor(const std::string& name) {
  if (name == "llama1b") {
    return {name, model::Architecture::kLlama, 128256, 2048, 16, 32, 8, 8192, true};
  }
  if (name == "qwen05b") {
    return {name, model::Architecture::kQwen2, 151936, 896, 24, 14, 2, 4864, false};
  }
  // tiny: testing::BenchmarkModelOptions()'s shape (~9M parameters).
  return {"tiny", model::Architecture::kLlama, 8000, 256, 6, 8, 4, 768, false};
}

bool WriteBenchCheckpoint(const Shape& s, int layers, const std::string& dir) {
  std::filesystem::create_directories(dir);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>((state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;  // [-1, 1)
  };
  model::SafetensorsWriter w;
  auto add = [&](const std::string& name, int64_t out, int64_t in, float scale, float center) {
    std::vector<uint8_t> bytes(static_cast<size_t>(out) * (in > 0 ? in : 1) * 2);
    auto* p = reinterpret_cast<uint16_t*>(bytes.data());
    const int64_t cols = in > 0 ? in : 1;
    for (int64_t r = 0; r < out; ++r) {
      const float row = in > 0 ? scale * (1.0f + 0.5f * next()) : scale;
      for (int64_t c = 0; c < cols; ++c) p[r * cols + c] = FloatToBf16(center + row * next());
    }
    std::vector<int64_t> shape = in > 0 ? std::vector<int64_t>{out, in} : std::vector<int64_t>{out};
    w.Add(name, model::DType::kBF16, shape, std::move(bytes));
  };
  const int hd = s.hidden / s.heads;
  const int64_t q = int64_t{s.heads} * hd, kv = int64_t{s.kv_heads} * hd;
  add("model.embed_tokens.weight", s.vocab, s.hidden, 1.0f, 0.0f);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const float inv_h = 1.7f / std::sqrt(static_cast<float>(s.hidden));
    add(p + "input_layernorm.weight", s.hidden, 0, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", s.hidden, 0, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", q, s.hidden, inv_h, 0.0f);
    add(p + "self_attn.k_proj.weight", kv, s.hidden, inv_h, 0.0f);
    add(p + "self_attn.v_proj.weight", kv, s.hidden, inv_h, 0.0f);
    if (s.arch == model::Architecture::kQwen2) {
      add(p + "self_attn.q_proj.bias", q, 0, 0.1f, 0.0f);
      add(p + "self_attn.k_proj.bias", kv, 0, 0.1f, 0.0f);
      add(p + "self_attn.v_proj.bias", kv, 0, 0.1f, 0.0f);
    }
    add(p + "self_attn.o_proj.weight", s.hidden, q, 1.7f / std::sqrt(static_cast<float>(q)), 0.0f);
    add(p + "mlp.gate_proj.weight", s.inter, s.hidden, inv_h, 0.0f);
    add(p + "mlp.up_proj.weight", s.inter, s.hidden, inv_h, 0.0f);
    add(p + "mlp.down_proj.weight", s.hidden, s.inter,
        1.7f / std::sqrt(static_cast<float>(s.inter)), 0.0f);
  }
  add("model.norm.weight", s.hidden, 0, 0.1f, 1.0f);
  if (!w.Write(dir + "/model.safetensors").ok()) return false;
  const bool qwen = s.arch == model::Architecture::kQwen2;
  nlohmann::json c = {
      {"architectures", {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen ? "qwen2" : "llama"},
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.inter},
      {"num_hidden_layers", layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"max_position_embeddings", 32768},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", qwen ? 1000000.0 : 500000.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", true},
      {"torch_dtype", "bfloat16"},
  };
  if (!qwen) c["attention_bias"] = false;
  if (s.llama3_rope) {
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  }
  std::ofstream(dir + "/config.json") << c.dump(2);
  return true;
}

}  // namespace gecd

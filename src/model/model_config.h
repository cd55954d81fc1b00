#ifndef GECD_MODEL_MODEL_CONFIG_H_
#define GECD_MODEL_MODEL_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// The architecture of a Hugging Face decoder-only checkpoint (config.json) and its generation
// defaults (generation_config.json): the Llama / Qwen2 / Mistral family, which all share
// RMSNorm, RoPE, grouped-query attention and a SwiGLU MLP.
namespace gecd::model {

enum class Architecture { kLlama, kQwen2, kMistral };

// rope_scaling of type "llama3" (Llama 3.1/3.2): frequencies below low_freq are divided by
// `factor`, above high_freq kept, smoothly interpolated between.
struct RopeScaling {
  std::string type;  // "" when absent, otherwise "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// compressed-tensors FP8_DYNAMIC: weights e4m3 per output channel (static), activations e4m3
// per token (dynamic). Which Linear layers are quantized follows the `ignore` list, whose
// entries are module names or "re:" patterns matched at the start of the name (Python's
// re.match, as compressed-tensors does). lm_head must be ignored, and each family (attention,
// MLP) must be quantized in every layer or in none; anything else is rejected at parse time.
struct QuantizationConfig {
  std::vector<std::string> ignore;  // as written in config.json
  bool attention_fp8 = true;        // q/k/v/o_proj quantized
  bool mlp_fp8 = true;              // gate/up/down_proj quantized
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // e.g. "LlamaForCausalLM"
  std::string model_type;         // e.g. "llama"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // hidden_size / num_attention_heads unless given
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  std::string torch_dtype;      // "float32", "bfloat16", "float16", or ""
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;
  std::optional<QuantizationConfig> quantization;
};

struct GenerationConfig {
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;
  std::optional<int> max_new_tokens;
};

// Parses config.json text as transformers 4 or 5 writes it (rope_theta/rope_scaling or
// rope_parameters; torch_dtype or dtype). `path` only labels errors, which name the offending
// key; unsupported features (other architectures, RoPE types, activations, quantization
// schemes) are errors. One exception: Mistral/Qwen2 `sliding_window` is not read; attention is
// always full, which matches the model for contexts up to the window (4096+ tokens).
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json, std::string_view path);
absl::StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json,
                                                       std::string_view path);

// Total parameters implied by the config (embeddings, layers, norms, lm_head when untied).
long long ParameterCount(const ModelConfig& config);

}  // namespace gecd::model

#endif  // GECD_MODEL_MODEL_CONFIG_H_

#ifndef GECD_MODEL_CHECKPOINT_H_
#define GECD_MODEL_CHECKPOINT_H_

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/safetensors.h"

// A Hugging Face model directory opened for reading: config.json, generation_config.json
// (optional), and the weights in model.safetensors or in shards listed by
// model.safetensors.index.json. All shards are mmapped; tensors are views until a backend
// converts them.
namespace gecd::model {

// One linear layer's weight as stored: either a plain float tensor (F32/BF16/F16) [out, in], or
// an F8_E4M3 tensor [out, in] with its per-output-channel scale [out, 1] (`scale` set).
struct LinearWeight {
  TensorView weight;
  std::optional<TensorView> scale;
  std::optional<TensorView> bias;  // [out], Qwen2's q/k/v

  bool is_fp8() const { return scale.has_value(); }
};

class Checkpoint {
 public:
  // Opens `dir`, validates config.json and that every tensor the config implies exists with the
  // right shape and an allowed dtype. Errors name the file and the tensor.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const GenerationConfig& generation_config() const { return generation_config_; }

  // Every tensor name across all shards, sorted.
  std::vector<std::string> TensorNames() const;
  absl::StatusOr<TensorView> Tensor(std::string_view name) const;
  // A float tensor (norm weights, embeddings) as f32, checked to hold `elements` values.
  absl::StatusOr<std::vector<float>> FloatTensor(std::string_view name, int64_t elements) const;

  // `module` is the Linear's name without ".weight", e.g. "model.layers.0.self_attn.q_proj".
  absl::StatusOr<LinearWeight> Linear(std::string_view module) const;

 private:
  Checkpoint() = default;
  absl::Status OpenWeights();     // fills shards_ and index_
  absl::Status Validate() const;  // every tensor the config implies, shape and dtype
  std::string dir_;
  ModelConfig config_;
  GenerationConfig generation_config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsFile*, std::less<>> index_;  // tensor -> shard
};

// Reads any float tensor (F32, BF16, F16, or F8_E4M3 decoded without scaling) into f32.
std::vector<float> ToFloat(const TensorView& tensor);
// The inverse: encodes f32 values as `dtype` bytes (rounding to nearest even; F8_E4M3
// saturates at 448 and applies no scale).
std::vector<uint8_t> FromFloat(std::span<const float> values, DType dtype);

}  // namespace gecd::model

#endif  // GECD_MODEL_CHECKPOINT_H_

#include "cuda_backend/cuda_weights.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "engine/cpu_backend.h"
#include "engine/linear_weights.h"

namespace gecd::engine {
namespace {

using kernels::CudaStatus;
using kernels::DeviceBuffer;

absl::Status UploadBytes(const void* host, size_t bytes, DeviceBuffer* dev) {
  RETURN_IF_ERROR(dev->Allocate(bytes));
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy(dev->get(), host, bytes, cudaMemcpyHostToDevice), "upload");
}

template <typename T>
absl::Status Upload(const std::vector<T>& host, DeviceBuffer* dev) {
  return UploadBytes(host.data(), host.size() * sizeof(T), dev);
}

// `modules` (fused along the output dimension: out rows in all, each [*, in]) on the device,
// FP8 when `want_fp8` (per channel unless `per_tensor`), else bf16.
absl::Status LoadLinear(const model::Checkpoint& checkpoint,
                        const std::vector<std::string>& modules, int64_t out, int64_t in,
                        bool want_fp8, bool per_tensor, CudaLinear* linear) {
  ASSIGN_OR_RETURN(HostLinear host,
                   PrepareLinear(checkpoint, modules, out, in, want_fp8, per_tensor));
  linear->out = static_cast<int>(out);
  linear->in = static_cast<int>(in);
  linear->fp8 = want_fp8;
  if (want_fp8) {
    RETURN_IF_ERROR(Upload(host.codes, &linear->weight));
    RETURN_IF_ERROR(Upload(host.scales, &linear->scale));
  } else {
    RETURN_IF_ERROR(Upload(host.bf16, &linear->weight));
  }
  if (!host.bias.empty()) RETURN_IF_ERROR(Upload(host.bias, &linear->bias));
  ProcessStartup().Mark("weights upload");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CudaWeights> CudaWeights::Load(const model::Checkpoint& checkpoint,
                                              const CudaWeightOptions& options) {
  const model::ModelConfig& c = checkpoint.config();
  const int hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_width = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t qkv_width = q_width + 2LL * c.num_key_value_heads * c.head_dim;
  CudaWeights w;
  // FP8 per family: the MLP whenever quantizing, attention unless attention_fp8 is off.
  auto fp8_ok = [](int64_t out, int64_t in) { return in % 16 == 0 && out % 8 == 0; };
  w.mlp_fp8 = options.fp8 && fp8_ok(2LL * inter, hidden) && fp8_ok(hidden, inter);
  w.attention_fp8 =
      options.fp8 && options.attention_fp8 && fp8_ok(qkv_width, hidden) && fp8_ok(hidden, q_width);
  w.per_tensor = options.per_tensor;
  ASSIGN_OR_RETURN(std::vector<float> embed,
                   checkpoint.FloatTensor("model.embed_tokens.weight",
                                          static_cast<int64_t>(c.vocab_size) * hidden));
  const std::vector<uint16_t> embed_bf16 = ToBf16(embed);
  embed.clear();
  embed.shrink_to_fit();
  ProcessStartup().Mark("weights read");
  RETURN_IF_ERROR(Upload(embed_bf16, &w.embed));
  ProcessStartup().Mark("weights upload");
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    CudaLayer layer;
    ASSIGN_OR_RETURN(std::vector<float> in_norm,
                     checkpoint.FloatTensor(p + "input_layernorm.weight", hidden));
    RETURN_IF_ERROR(Upload(in_norm, &layer.input_norm));
    ASSIGN_OR_RETURN(std::vector<float> post_norm,
                     checkpoint.FloatTensor(p + "post_attention_layernorm.weight", hidden));
    RETURN_IF_ERROR(Upload(post_norm, &layer.post_attention_norm));
    RETURN_IF_ERROR(LoadLinear(
        checkpoint, {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
        qkv_width, hidden, w.attention_fp8, w.per_tensor, &layer.qkv));
    RETURN_IF_ERROR(LoadLinear(checkpoint, {p + "self_attn.o_proj"}, hidden, q_width,
                               w.attention_fp8, w.per_tensor, &layer.o));
    RETURN_IF_ERROR(LoadLinear(checkpoint, {p + "mlp.gate_proj", p + "mlp.up_proj"}, 2LL * inter,
                               hidden, w.mlp_fp8, w.per_tensor, &layer.gate_up));
    RETURN_IF_ERROR(LoadLinear(checkpoint, {p + "mlp.down_proj"}, hidden, inter, w.mlp_fp8,
                               w.per_tensor, &layer.down));
    if (layer.o.bias.get() != nullptr || layer.gate_up.bias.get() != nullptr ||
        layer.down.bias.get() != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(p, ": biases are supported on q/k/v only (as in Qwen2)"));
    }
    w.layers.push_back(std::move(layer));
  }
  ASSIGN_OR_RETURN(std::vector<float> final_norm,
                   checkpoint.FloatTensor("model.norm.weight", hidden));
  RETURN_IF_ERROR(Upload(final_norm, &w.final_norm));
  if (!c.tie_word_embeddings) {
    CudaLinear head;
    RETURN_IF_ERROR(
        LoadLinear(checkpoint, {"lm_head"}, c.vocab_size, hidden, false, w.per_tensor, &head));
    w.lm_head = std::move(head.weight);
  }
  RETURN_IF_ERROR(Upload(RopeInverseFrequencies(c), &w.inv_freq));
  return w;
}

}  // namespace gecd::engine

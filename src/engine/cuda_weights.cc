#include "engine/cuda_weights.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/numerics.h"
#include "common/status_macros.h"
#include "engine/cpu_backend.h"

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

// Runs fn(begin, end) over [0, n) split across the host's cores: converting and quantizing a
// billion weights one core at a time would dominate start-up.
// `serial_below`: item counts that are not worth threads.
template <typename Fn>
void ParallelFor(size_t n, Fn fn, size_t serial_below = 1u << 16) {
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  if (n < serial_below || threads == 1) {
    fn(size_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  const size_t chunk = (n + threads - 1) / threads;
  for (size_t begin = 0; begin < n; begin += chunk) {
    pool.emplace_back(fn, begin, std::min(n, begin + chunk));
  }
  for (std::thread& t : pool) t.join();
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  ParallelFor(v.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = FloatToBf16(v[i]);
  });
  return out;
}

// Reads `modules` (fused along the output dimension: out rows in all, each [*, in]) into
// `linear`, FP8 when `want_fp8` (per channel unless `per_tensor`), else bf16.
absl::Status LoadLinear(const model::Checkpoint& checkpoint,
                        const std::vector<std::string>& modules, int64_t out, int64_t in,
                        bool want_fp8, bool per_tensor, CudaLinear* linear) {
  std::vector<float> values;        // f32 [out, in] (dequantized) unless codes are kept
  std::vector<uint8_t> codes;       // e4m3 [out, in] when FP8 per channel
  std::vector<float> scales;        // [out] when FP8 per channel
  std::vector<float> bias;
  bool any_bias = false;
  int64_t rows = 0;
  const bool keep_codes = want_fp8 && !per_tensor;
  for (const std::string& m : modules) {
    ASSIGN_OR_RETURN(model::LinearWeight w, checkpoint.Linear(m));
    if (w.weight.shape.size() != 2 || w.weight.shape[1] != in) {
      return absl::InvalidArgumentError(absl::StrCat(m, ": weight is not [*, ", in, "]"));
    }
    const int64_t r = w.weight.shape[0];
    std::vector<float> f = model::ToFloat(w.weight);  // e4m3 decoded without its scale
    std::vector<float> s;
    if (w.is_fp8()) {
      s = model::ToFloat(*w.scale);
      if (static_cast<int64_t>(s.size()) != r) {
        return absl::InvalidArgumentError(absl::StrCat(m, ": weight_scale has ", s.size(),
                                                       " entries for ", r, " rows"));
      }
    }
    if (keep_codes) {
      std::vector<uint8_t> c(f.size());
      if (w.is_fp8()) {
        // Used as they are: the stored codes and scales.
        std::memcpy(c.data(), w.weight.data.data(), c.size());
      } else {
        s.resize(r);
        ParallelFor(static_cast<size_t>(r), [&](size_t begin, size_t end) {
          QuantizeRowsE4m3Codes(f.data() + begin * in, end - begin, in, c.data() + begin * in,
                                s.data() + begin);
        }, /*serial_below=*/64);
      }
      codes.insert(codes.end(), c.begin(), c.end());
      scales.insert(scales.end(), s.begin(), s.end());
    } else {
      if (w.is_fp8()) {
        ParallelFor(static_cast<size_t>(r), [&](size_t begin, size_t end) {
          for (size_t o = begin; o < end; ++o) {
            for (int64_t i = 0; i < in; ++i) f[o * in + i] *= s[o];
          }
        }, /*serial_below=*/64);
      }
      values.insert(values.end(), f.begin(), f.end());
    }
    std::vector<float> bv(r, 0.0f);
    if (w.bias.has_value()) {
      any_bias = true;
      bv = model::ToFloat(*w.bias);
      if (static_cast<int64_t>(bv.size()) != r) {
        return absl::InvalidArgumentError(absl::StrCat(m, ": bias has ", bv.size(), " entries"));
      }
    }
    bias.insert(bias.end(), bv.begin(), bv.end());
    rows += r;
  }
  if (rows != out) {
    return absl::InvalidArgumentError(
        absl::StrCat(modules[0], ": expected ", out, " output rows, got ", rows));
  }
  linear->out = static_cast<int>(out);
  linear->in = static_cast<int>(in);
  linear->fp8 = want_fp8;
  if (keep_codes) {
    RETURN_IF_ERROR(Upload(codes, &linear->weight));
    RETURN_IF_ERROR(Upload(scales, &linear->scale));
  } else if (want_fp8) {
    // Per tensor: one scale for the whole (fused) matrix.
    codes.resize(values.size());
    std::vector<float> scale(1);
    QuantizeRowsE4m3Codes(values.data(), 1, values.size(), codes.data(), scale.data());
    RETURN_IF_ERROR(Upload(codes, &linear->weight));
    RETURN_IF_ERROR(Upload(scale, &linear->scale));
  } else {
    RETURN_IF_ERROR(Upload(ToBf16(values), &linear->weight));
  }
  if (any_bias) RETURN_IF_ERROR(Upload(bias, &linear->bias));
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
  w.attention_fp8 = options.fp8 && options.attention_fp8 && fp8_ok(qkv_width, hidden) &&
                    fp8_ok(hidden, q_width);
  w.per_tensor = options.per_tensor;
  ASSIGN_OR_RETURN(std::vector<float> embed,
                   checkpoint.FloatTensor("model.embed_tokens.weight",
                              static_cast<int64_t>(c.vocab_size) * hidden));
  RETURN_IF_ERROR(Upload(ToBf16(embed), &w.embed));
  embed.clear();
  embed.shrink_to_fit();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    CudaLayer layer;
    ASSIGN_OR_RETURN(std::vector<float> in_norm,
                     checkpoint.FloatTensor(p + "input_layernorm.weight", hidden));
    RETURN_IF_ERROR(Upload(in_norm, &layer.input_norm));
    ASSIGN_OR_RETURN(std::vector<float> post_norm,
                     checkpoint.FloatTensor(p + "post_attention_layernorm.weight", hidden));
    RETURN_IF_ERROR(Upload(post_norm, &layer.post_attention_norm));
    RETURN_IF_ERROR(LoadLinear(checkpoint,
                               {p + "self_attn.q_proj", p + "self_attn.k_proj",
                                p + "self_attn.v_proj"},
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
    RETURN_IF_ERROR(LoadLinear(checkpoint, {"lm_head"}, c.vocab_size, hidden, false,
                               w.per_tensor, &head));
    w.lm_head = std::move(head.weight);
  }
  RETURN_IF_ERROR(Upload(RopeInverseFrequencies(c), &w.inv_freq));
  return w;
}

}  // namespace gecd::engine

#include "cuda_backend/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "spdlog/spdlog.h"

namespace gecd::engine {
namespace {

using kernels::CudaStatus;
using kernels::DeviceBuffer;

// Launch helpers return cudaError_t; this names the kernel in the Status.
#define LAUNCH(expr) RETURN_IF_ERROR(CudaStatus((expr), #expr))

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const model::Checkpoint& checkpoint, const CudaBackendOptions& options) {
  auto b = std::unique_ptr<CudaBackend>(new CudaBackend());
  RETURN_IF_ERROR(b->Init(checkpoint, options));
  return b;
}

CudaBackend::~CudaBackend() {
  // Nothing may still write buffers the members' destructors free.
  if (stream_.get() != nullptr) cudaStreamSynchronize(stream_.get());
}

absl::Status CudaBackend::Init(const model::Checkpoint& checkpoint,
                               const CudaBackendOptions& options) {
  RETURN_IF_ERROR(CheckShapeAndOptions(checkpoint, options));
  RETURN_IF_ERROR(SelectDevice(options.device));
  SetShape(checkpoint.config(), options);
  RETURN_IF_ERROR(stream_.Create());
  RETURN_IF_ERROR(gemm_.Init());
  // The device's context is made by the first runtime calls above.
  ProcessStartup().Mark("CUDA context");
  ASSIGN_OR_RETURN(weights_,
                   CudaWeights::Load(checkpoint, {.fp8 = options.quantization ==
                                                         CudaBackendOptions::Quantization::kFp8,
                                                  .attention_fp8 = options.attention_fp8,
                                                  .per_tensor = per_tensor_}));
  RETURN_IF_ERROR(AllocateWorkspaces());
  RETURN_IF_ERROR(AllocateKvCache());
  RETURN_IF_ERROR(AllocateStepBuffers());
  SetGraphBuckets();
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_.get()), "Create sync"));
  // The graphs are captured by the first step of each size (the daemon's warm-up runs them).
  ProcessStartup().Mark("KV cache and step buffers");
  spdlog::info("cuda backend: {}", Describe());
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckShapeAndOptions(const model::Checkpoint& checkpoint,
                                               const CudaBackendOptions& options) {
  const model::ModelConfig& c = checkpoint.config();
  if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
      c.num_key_value_heads <= 0 || c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 256 ||
      c.vocab_size <= 0 || c.intermediate_size <= 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0 ||
      c.num_attention_heads / c.num_key_value_heads * c.head_dim > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.dir(), ": unsupported model shape for the cuda backend (heads ",
                     c.num_attention_heads, ", kv heads ", c.num_key_value_heads, ", head_dim ",
                     c.head_dim, ")"));
  }
  if (options.kv_block_size <= 0 || options.max_step_tokens <= 0 || options.max_batch_size <= 0 ||
      options.kv_cache_memory_fraction <= 0.0 || options.kv_cache_memory_fraction > 1.0) {
    return absl::InvalidArgumentError(
        "CudaBackend: kv_block_size, max_step_tokens, max_batch_size must be positive and "
        "kv_cache_memory_fraction in (0, 1]");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::SelectDevice(int device) {
  int devices = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"));
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackend: device ", device, " not among the ", devices, " visible"));
  }
  return CudaStatus(cudaSetDevice(device), "cudaSetDevice");
}

void CudaBackend::SetShape(const model::ModelConfig& c, const CudaBackendOptions& options) {
  options_ = options;
  config_ = c;
  per_tensor_ = options.fp8_scaling == CudaBackendOptions::Fp8Scaling::kPerTensor;
  max_step_tokens_ = options.max_step_tokens;
  max_batch_size_ = std::min(options.max_batch_size, options.max_step_tokens);
  q_width_ = c.num_attention_heads * c.head_dim;
  kv_width_ = c.num_key_value_heads * c.head_dim;
  qkv_width_ = q_width_ + 2 * kv_width_;
}

absl::Status CudaBackend::AllocateWorkspaces() {
  const int hidden = config_.hidden_size, inter = config_.intermediate_size;
  const size_t t = max_step_tokens_, bmax = max_batch_size_;
  const size_t wide = std::max({hidden, inter, q_width_});
  const size_t max_out = std::max({static_cast<size_t>(qkv_width_), 2 * static_cast<size_t>(inter),
                                   static_cast<size_t>(hidden)});
  RETURN_IF_ERROR(x_.Allocate(t * hidden * sizeof(float)));
  RETURN_IF_ERROR(h_.Allocate(t * wide * 2));
  RETURN_IF_ERROR(h_fp8_.Allocate(t * wide));
  RETURN_IF_ERROR(h_scale_.Allocate(t * sizeof(float)));
  RETURN_IF_ERROR(amax_.Allocate(sizeof(float)));
  RETURN_IF_ERROR(qkv_.Allocate(t * qkv_width_ * 2));
  RETURN_IF_ERROR(q_.Allocate(t * q_width_ * 2));
  RETURN_IF_ERROR(attn_.Allocate(t * q_width_ * 2));
  RETURN_IF_ERROR(delta_.Allocate(t * hidden * 2));
  RETURN_IF_ERROR(gate_up_.Allocate(t * 2 * inter * 2));
  if (weights_.mlp_fp8 || weights_.attention_fp8) {
    RETURN_IF_ERROR(gemm_acc_.Allocate(t * max_out * sizeof(float)));
  }
  RETURN_IF_ERROR(last_.Allocate(bmax * hidden * 2));
  RETURN_IF_ERROR(logits_.Allocate(bmax * config_.vocab_size * sizeof(float)));
  RETURN_IF_ERROR(out_tokens_.Allocate(bmax * sizeof(int32_t)));
  RETURN_IF_ERROR(resolved_.Allocate(t * sizeof(int32_t)));
  RETURN_IF_ERROR(candidate_.Allocate(bmax * sizeof(int32_t)));
  RETURN_IF_ERROR(copy_bias_.Allocate(bmax * sizeof(float)));
  return absl::OkStatus();
}

absl::Status CudaBackend::AllocateKvCache() {
  const model::ModelConfig& c = config_;
  // KV cache: a fraction of what is free now, plus one scratch block for padded graph rows.
  layout_ = {.num_layers = c.num_hidden_layers,
             .num_kv_heads = c.num_key_value_heads,
             .head_dim = c.head_dim,
             .block_size = options_.kv_block_size};
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  device_total_memory_ = total_bytes;
  const size_t block_bytes = static_cast<size_t>(layout_.ElementsPerBlock()) * 2;
  int64_t blocks =
      options_.num_kv_blocks > 0
          ? options_.num_kv_blocks
          : static_cast<int64_t>(free_bytes * options_.kv_cache_memory_fraction / block_bytes) - 1;
  blocks = std::min<int64_t>(blocks, 1 << 30);
  // The key the cache's size came from names it in errors.
  const char* kv_key =
      options_.num_kv_blocks > 0 ? "engine.kv_cache_blocks" : "engine.kv_cache_memory_fraction";
  if (blocks <= 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat(kv_key, ": ", free_bytes, " bytes free on the device hold no KV block"));
  }
  layout_.num_blocks = static_cast<int>(blocks);
  const size_t per_cache = static_cast<size_t>(blocks + 1) * block_bytes / 2;
  if (2 * per_cache > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kv_key, ": a KV cache of ", blocks, " blocks (", 2 * per_cache, " bytes) exceeds the ",
        free_bytes, " bytes free on device ", options_.device));
  }
  for (DeviceBuffer* cache : {&k_cache_, &v_cache_}) {
    if (absl::Status s = cache->Allocate(per_cache); !s.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(kv_key, ": cannot allocate the KV cache (",
                                                       2 * per_cache, " bytes) on device ",
                                                       options_.device, ": ", s.message()));
    }
  }
  int64_t max_context = layout_.capacity_tokens();
  if (c.max_position_embeddings > 0) {
    max_context = std::min<int64_t>(max_context, c.max_position_embeddings);
  }
  max_context_ = static_cast<int>(std::min<int64_t>(max_context, 1 << 30));
  return absl::OkStatus();
}

absl::Status CudaBackend::AllocateStepBuffers() {
  const size_t bmax = max_batch_size_;
  // Step inputs: 4 per-token arrays, sampled rows and their copy rows, block ids (+1 scratch
  // entry), then copy texts (room for 64 tokens per sampled row to start with: GEC texts are
  // sentences).
  max_block_ids_ = layout_.num_blocks + max_step_tokens_ + 1;
  fixed_input_ints_ = StepInputLayout::FixedInts(max_step_tokens_, max_batch_size_, max_block_ids_);
  RETURN_IF_ERROR(ReserveInputs(64 * bmax));
  for (int s = 0; s < kSlots; ++s) {
    RETURN_IF_ERROR(pinned_tokens_[s].Allocate(bmax * sizeof(int32_t)));
  }
  for (int e = 0; e < kEventRing; ++e) {
    RETURN_IF_ERROR(start_[e].Create());
    RETURN_IF_ERROR(done_[e].Create());
  }
  return CudaStatus(cudaMemsetAsync(out_tokens_.get(), 0, bmax * sizeof(int32_t), stream_.get()),
                    "clear out_tokens");
}

void CudaBackend::SetGraphBuckets() {
  for (int g : options_.graph_batch_sizes) {
    if (g > 0 && g <= max_batch_size_) buckets_.push_back(g);
  }
  std::sort(buckets_.begin(), buckets_.end());
  buckets_.erase(std::unique(buckets_.begin(), buckets_.end()), buckets_.end());
  graphs_.resize(buckets_.size());
  graph_failed_.assign(buckets_.size(), false);
}

std::string CudaBackend::Describe() const {
  cudaDeviceProp prop{};
  std::string name = "?";
  if (cudaGetDeviceProperties(&prop, options_.device) == cudaSuccess) name = prop.name;
  const std::vector<CudaLayer>& layers = weights_.layers;
  const bool any_fp8 = !layers.empty() && (layers[0].qkv.fp8 || layers[0].gate_up.fp8);
  return absl::StrCat(
      "device ", options_.device, " (", name, "), weights ",
      any_fp8 ? absl::StrCat("FP8 ", per_tensor_ ? "per-tensor" : "per-channel",
                             layers[0].qkv.fp8 ? " (attention FP8)" : " (attention bf16)")
              : std::string("bf16"),
      any_fp8 && !per_tensor_ ? absl::StrCat("; ", gemm_.Describe()) : std::string(), "; graphs ",
      buckets_.empty() ? std::string("off") : absl::StrCat(buckets_.size(), " buckets"), "; async ",
      options_.async ? "on" : "off", "; KV cache ", layout_.num_blocks, " blocks of ",
      layout_.block_size, " tokens");
}

std::string CudaBackend::StatsSummary() const {
  const CudaBackendStats& s = stats_;
  return absl::StrFormat(
      "%d steps (%d replayed a graph, %d graphs captured), device busy %.1f ms, idle %.1f ms "
      "between back-to-back steps in %d gaps over 20 us (%.1f us a step)",
      s.steps, s.graph_steps, s.graphs_captured, s.device_busy_ms, s.device_idle_ms, s.idle_gaps,
      s.steps == 0 ? 0.0 : s.device_idle_ms * 1e3 / static_cast<double>(s.steps));
}

absl::Status CudaBackend::Validate(const StepBatch& batch, int* sampled) const {
  if (batch.num_tokens() > max_step_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step has ", batch.num_tokens(), " tokens; the backend takes at most ", max_step_tokens_));
  }
  *sampled = batch.num_sampled();
  if (*sampled > max_batch_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step samples ", *sampled, " sequences; the backend takes at most ", max_batch_size_));
  }
  // Each sampled row's text is at most a context long; more is not a batch the engine makes.
  if (static_cast<int64_t>(batch.copy_tokens.size()) >
      static_cast<int64_t>(*sampled) * max_context_) {
    return absl::InvalidArgumentError(absl::StrCat("step carries ", batch.copy_tokens.size(),
                                                   " copy tokens for ", *sampled,
                                                   " sampled rows of at most ", max_context_));
  }
  if (static_cast<int64_t>(batch.block_ids.size()) >= max_block_ids_) {
    return absl::InvalidArgumentError(absl::StrCat("step carries ", batch.block_ids.size(),
                                                   " block ids; at most ", max_block_ids_ - 1));
  }
  int expected_offset = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchSequence& s = batch.sequences[i];
    const std::string where = absl::StrCat("step sequence ", i, ": ");
    RETURN_IF_ERROR(CheckSequence(batch, i, expected_offset, layout_, max_context_));
    expected_offset += s.num_tokens;
    if (s.num_drafts > 0) {
      return absl::InvalidArgumentError(where + "drafts to verify; this backend cannot verify");
    }
    if (s.previous_sample >= 0 && (s.num_tokens != 1 || s.previous_sample >= last_sampled_)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "previous_sample ", s.previous_sample, " of a ", s.num_tokens,
                       "-token entry; the previous step sampled ", last_sampled_));
    }
    if (s.previous_sample < 0) {
      RETURN_IF_ERROR(CheckTokenIds(
          std::span<const int32_t>(batch.tokens).subspan(s.token_offset, s.num_tokens),
          config_.vocab_size));
    }
  }
  if (expected_offset != batch.num_tokens()) {
    return absl::InvalidArgumentError("step tokens not covered by its sequences");
  }
  return CheckTokenIds(batch.copy_tokens, config_.vocab_size);
}

CudaBackend::StepInputs CudaBackend::DeviceInputs(const StepInputLayout& at) const {
  const int32_t* base = inputs_.as<int32_t>();
  StepInputs in;
  in.base = base;
  in.tokens = base + at.tokens;
  in.prev_index = base + at.prev_index;
  in.positions = base + at.positions;
  in.table_offsets = base + at.table_offsets;
  in.sample_rows = base + at.sample_rows;
  in.copy_rows = reinterpret_cast<const kernels::CopyRow*>(base + at.copy_rows);
  in.block_ids = base + at.block_ids;
  return in;
}

absl::Status CudaBackend::ReserveInputs(size_t copy_ints) {
  if (inputs_.get() != nullptr && copy_ints <= copy_ints_) return absl::OkStatus();
  if (inputs_.get() != nullptr) {
    // In-flight steps still read the old buffers.
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_.get()), "grow step inputs"));
    copy_ints = std::max(copy_ints, 2 * copy_ints_);
    for (kernels::GraphExec& g : graphs_) g.Reset();
    graph_failed_.assign(graph_failed_.size(), false);
  }
  const size_t bytes = (fixed_input_ints_ + copy_ints) * sizeof(int32_t);
  RETURN_IF_ERROR(inputs_.Allocate(bytes));
  for (kernels::PinnedBuffer& pinned : pinned_in_) RETURN_IF_ERROR(pinned.Allocate(bytes));
  copy_ints_ = copy_ints;
  return absl::OkStatus();
}

absl::Status CudaBackend::FinishAct(bool fp8, uint16_t* bf16, int rows, int cols, Act* act) {
  if (!fp8) {
    act->bf16 = bf16;
    return absl::OkStatus();
  }
  act->fp8 = h_fp8_.as<uint8_t>();
  act->scale = h_scale_.as<float>();
  if (per_tensor_) {
    LAUNCH(kernels::LaunchQuantizeTensor(bf16, rows, cols, h_fp8_.as<uint8_t>(),
                                         h_scale_.as<float>(), amax_.as<float>(), stream_.get()));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::LinearForward(const CudaLinear& l, const Act& in, int rows, uint16_t* y) {
  const auto* w = static_cast<const uint8_t*>(l.weight.get());
  if (!l.fp8) {
    return gemm_.Bf16(in.bf16, l.weight.as<uint16_t>(), rows, l.out, l.in, y,
                      kernels::GemmOut::kBf16, stream_.get());
  }
  if (per_tensor_) {
    return gemm_.Fp8PerTensor(in.fp8, in.scale, w, l.scale.as<float>(), rows, l.out, l.in, y,
                              stream_.get());
  }
  return gemm_.Fp8RowCol(in.fp8, in.scale, w, l.scale.as<float>(), rows, l.out, l.in, y,
                         gemm_acc_.as<float>(), stream_.get());
}

absl::Status CudaBackend::EnqueueForward(int rows, int sampled, const StepInputs& in) {
  cudaStream_t st = stream_.get();
  const int hidden = config_.hidden_size, inter = config_.intermediate_size;
  const float eps = config_.rms_norm_eps;
  float* x = x_.as<float>();
  uint16_t* h = h_.as<uint16_t>();
  uint16_t* delta = delta_.as<uint16_t>();
  const CudaWeights& w = weights_;
  // The per-row FP8 outputs of a producer, when its consumer is FP8 per channel.
  auto fp8_out = [&](bool fp8) { return fp8 && !per_tensor_ ? h_fp8_.as<uint8_t>() : nullptr; };
  auto scale_out = [&](bool fp8) { return fp8 && !per_tensor_ ? h_scale_.as<float>() : nullptr; };
  // bf16 output is needed by bf16 consumers and by the per-tensor quantizer.
  auto bf16_out = [&](bool fp8) { return !fp8 || per_tensor_ ? h : nullptr; };

  LAUNCH(kernels::LaunchEmbedding(w.embed.as<uint16_t>(), config_.vocab_size, in.tokens,
                                  in.prev_index, out_tokens_.as<int32_t>(), rows, hidden, x,
                                  resolved_.as<int32_t>(), st));
  const kernels::TokenMeta meta{in.positions, in.table_offsets, in.block_ids};
  const kernels::RopeParams rope{config_.num_attention_heads, config_.num_key_value_heads,
                                 config_.head_dim, layout_.block_size};
  const kernels::AttentionParams attn{config_.num_attention_heads, config_.num_key_value_heads,
                                      config_.head_dim, layout_.block_size,
                                      1.0f / std::sqrt(static_cast<float>(config_.head_dim))};
  const size_t layer_cache =
      static_cast<size_t>(layout_.num_blocks + 1) * layout_.block_size * kv_width_;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const CudaLayer& layer = w.layers[l];
    uint16_t* k_cache = k_cache_.as<uint16_t>() + l * layer_cache;
    uint16_t* v_cache = v_cache_.as<uint16_t>() + l * layer_cache;
    // Attention block: (residual += previous layer's MLP output), norm, qkv.
    const bool afp8 = layer.qkv.fp8;
    LAUNCH(kernels::LaunchAddRmsNorm(x, l == 0 ? nullptr : delta, nullptr,
                                     layer.input_norm.as<float>(), rows, hidden, eps,
                                     bf16_out(afp8), fp8_out(afp8), scale_out(afp8), st));
    Act act;
    RETURN_IF_ERROR(FinishAct(afp8, h, rows, hidden, &act));
    RETURN_IF_ERROR(LinearForward(layer.qkv, act, rows, qkv_.as<uint16_t>()));
    LAUNCH(kernels::LaunchRopeKvWrite(qkv_.as<uint16_t>(), layer.qkv.bias.as<float>(),
                                      w.inv_freq.as<float>(), meta, rows, rope, q_.as<uint16_t>(),
                                      k_cache, v_cache, st));
    LAUNCH(kernels::LaunchPagedAttention(q_.as<uint16_t>(), k_cache, v_cache, meta, rows, attn,
                                         attn_.as<uint16_t>(), st));
    Act o_in;
    if (layer.o.fp8 && !per_tensor_) {
      LAUNCH(kernels::LaunchQuantizeRows(attn_.as<uint16_t>(), rows, q_width_, h_fp8_.as<uint8_t>(),
                                         h_scale_.as<float>(), st));
      o_in = {nullptr, h_fp8_.as<uint8_t>(), h_scale_.as<float>()};
    } else {
      RETURN_IF_ERROR(FinishAct(layer.o.fp8, attn_.as<uint16_t>(), rows, q_width_, &o_in));
    }
    RETURN_IF_ERROR(LinearForward(layer.o, o_in, rows, delta));
    // MLP block: residual += o, norm, gate/up, SwiGLU, down.
    const bool mfp8 = layer.gate_up.fp8;
    LAUNCH(kernels::LaunchAddRmsNorm(x, delta, nullptr, layer.post_attention_norm.as<float>(), rows,
                                     hidden, eps, bf16_out(mfp8), fp8_out(mfp8), scale_out(mfp8),
                                     st));
    RETURN_IF_ERROR(FinishAct(mfp8, h, rows, hidden, &act));
    RETURN_IF_ERROR(LinearForward(layer.gate_up, act, rows, gate_up_.as<uint16_t>()));
    LAUNCH(kernels::LaunchSwiGlu(gate_up_.as<uint16_t>(), rows, inter, bf16_out(mfp8),
                                 fp8_out(mfp8), scale_out(mfp8), st));
    Act down_in;
    RETURN_IF_ERROR(FinishAct(mfp8, h, rows, inter, &down_in));
    RETURN_IF_ERROR(LinearForward(layer.down, down_in, rows, delta));
  }
  if (sampled == 0) {
    // No LM head; the last MLP output still belongs in the residual for completeness.
    return absl::OkStatus();
  }
  // Final norm on the sampled rows only (residual += last MLP output on those rows).
  LAUNCH(kernels::LaunchAddRmsNorm(x, delta, in.sample_rows, w.final_norm.as<float>(), sampled,
                                   hidden, eps, last_.as<uint16_t>(), nullptr, nullptr, st));
  const uint16_t* head =
      w.lm_head.get() != nullptr ? w.lm_head.as<uint16_t>() : w.embed.as<uint16_t>();
  RETURN_IF_ERROR(gemm_.Bf16(last_.as<uint16_t>(), head, sampled, config_.vocab_size, hidden,
                             logits_.get(), kernels::GemmOut::kF32, st));
  LAUNCH(kernels::LaunchCopyCandidates(in.copy_rows, in.base, in.sample_rows,
                                       resolved_.as<int32_t>(), sampled, candidate_.as<int32_t>(),
                                       copy_bias_.as<float>(), st));
  LAUNCH(kernels::LaunchArgmax(logits_.as<float>(), sampled, config_.vocab_size,
                               candidate_.as<int32_t>(), copy_bias_.as<float>(),
                               out_tokens_.as<int32_t>(), st));
  return absl::OkStatus();
}

absl::StatusOr<kernels::GraphExec*> CudaBackend::GraphFor(int bucket_index) {
  kernels::GraphExec& g = graphs_[bucket_index];
  if (g.valid()) return &g;
  const int b = buckets_[bucket_index];
  cudaStream_t st = stream_.get();
  RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed),
                             "cudaStreamBeginCapture"));
  const absl::Status enqueued = EnqueueForward(b, b, DeviceInputs(StepInputLayout(b, b)));
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(st, &graph);
  if (!enqueued.ok() || end != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    return absl::InternalError(
        absl::StrCat("capturing the decode graph of ", b,
                     " rows: ", enqueued.ok() ? cudaGetErrorString(end) : enqueued.ToString()));
  }
  RETURN_IF_ERROR(g.Instantiate(graph));
  ++stats_.graphs_captured;
  return &g;
}

absl::Status CudaBackend::Forward(const StepBatch& batch, StepResult* result) {
  RETURN_IF_ERROR(Submit(batch));
  return Collect(result);
}

absl::Status CudaBackend::Submit(const StepBatch& batch) {
  if (static_cast<int>(in_flight_.size()) >= kSlots) {
    return absl::FailedPreconditionError("Submit: too many steps in flight; Collect first");
  }
  int sampled = 0;
  RETURN_IF_ERROR(Validate(batch, &sampled));
  // The engine may call from another thread than Create's; the current device is per thread.
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  RETURN_IF_ERROR(ReserveInputs(batch.copy_tokens.size()));
  InFlight f;
  f.step = next_step_;
  f.slot = static_cast<int>(next_step_ % kSlots);
  f.sampled = sampled;
  f.logits = batch.return_logits;
  const int tokens = batch.num_tokens();
  if (tokens == 0) {
    f.empty = true;
    last_sampled_ = 0;
    ++next_step_;
    in_flight_.push_back(f);
    return absl::OkStatus();
  }
  const StepShape shape = ShapeFor(batch, sampled);
  const StepInputLayout at(shape.rows, shape.sample_rows);
  const size_t ints = PackInputs(batch, shape, at, pinned_in_[f.slot].as<int32_t>());
  RETURN_IF_ERROR(EnqueueStep(f, shape, at, ints));
  if (shape.bucket >= 0 && !shape.replay) CaptureGraph(shape.bucket);
  last_sampled_ = sampled;
  ++next_step_;
  in_flight_.push_back(f);
  if (!options_.async) {
    const int ev = static_cast<int>(f.step % kEventRing);
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(done_[ev].get()), "step (sync mode)"));
  }
  return absl::OkStatus();
}

int CudaBackend::DecodeBucket(const StepBatch& batch) const {
  // Decode-only steps that fit a bucket replay its graph.
  if (!graphs_enabled_ || buckets_.empty()) return -1;
  for (const BatchSequence& s : batch.sequences) {
    if (s.num_tokens != 1 || !s.sample) return -1;
  }
  const int tokens = batch.num_tokens();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i] >= tokens && !graph_failed_[i]) return static_cast<int>(i);
  }
  return -1;
}

CudaBackend::StepShape CudaBackend::ShapeFor(const StepBatch& batch, int sampled) const {
  const int tokens = batch.num_tokens();
  StepShape shape;
  shape.bucket = DecodeBucket(batch);
  if (shape.bucket >= 0) {
    // A bucket's first step runs eagerly with the graph's exact padded shape (loading every
    // kernel module and caching every GEMM plan, which capture must not do), and its graph is
    // captured right after; later steps replay it.
    shape.replay = graphs_[shape.bucket].valid();
    shape.rows = buckets_[shape.bucket];
    shape.sample_rows = shape.rows;
    return shape;
  }
  // Eager steps pad their token rows to a multiple of kRowQuantum (padded rows behave like a
  // graph's), so GEMM shapes, and the cuBLASLt plans cached per shape, stay few.
  constexpr int kRowQuantum = 64;
  shape.rows = std::max(
      tokens, std::min(max_step_tokens_, (tokens + kRowQuantum - 1) / kRowQuantum * kRowQuantum));
  shape.sample_rows = sampled;
  return shape;
}

size_t CudaBackend::PackInputs(const StepBatch& batch, const StepShape& shape,
                               const StepInputLayout& at, int32_t* pin) const {
  // One host pass into the pinned slot, laid out as StepInputLayout says.
  const int tokens = batch.num_tokens();
  int32_t* p_tokens = pin + at.tokens;
  int32_t* p_prev = pin + at.prev_index;
  int32_t* p_pos = pin + at.positions;
  int32_t* p_off = pin + at.table_offsets;
  int32_t* p_samples = pin + at.sample_rows;
  int32_t* p_copy = pin + at.copy_rows;
  int32_t* p_blocks = pin + at.block_ids;
  const int nblocks = static_cast<int>(batch.block_ids.size());
  std::memcpy(p_blocks, batch.block_ids.data(), nblocks * sizeof(int32_t));
  p_blocks[nblocks] = layout_.num_blocks;  // the scratch block, for padded rows
  const size_t texts_at = at.texts(nblocks + 1);
  int32_t* p_texts = pin + texts_at;
  std::memcpy(p_texts, batch.copy_tokens.data(), batch.copy_tokens.size() * sizeof(int32_t));
  auto put_copy = [&](int q, const kernels::CopyRow& row) {
    std::memcpy(p_copy + StepInputLayout::kCopyRowInts * q, &row, sizeof(row));
  };
  int sample = 0;
  for (const BatchSequence& s : batch.sequences) {
    for (int k = 0; k < s.num_tokens; ++k) {
      const int t = s.token_offset + k;
      p_tokens[t] = s.previous_sample >= 0 ? 0 : batch.tokens[t];
      p_prev[t] = s.previous_sample;
      p_pos[t] = s.start_position + k;
      p_off[t] = s.block_offset;
    }
    if (!s.sample) continue;
    put_copy(sample, {.bias = s.copy.bias,
                      .text_offset = static_cast<int32_t>(texts_at) + s.copy.text_offset,
                      .text_length = s.copy.text_length,
                      .end_token = s.copy.end_token,
                      .position = s.copy.cursor.position,
                      .aligned = s.copy.cursor.aligned,
                      .advance = s.copy.advance});
    p_samples[sample++] = s.token_offset + s.num_tokens - 1;
  }
  for (int t = tokens; t < shape.rows; ++t) {  // padding: position 0 of the scratch block
    p_tokens[t] = 0;
    p_prev[t] = -1;
    p_pos[t] = 0;
    p_off[t] = nblocks;
  }
  for (int q = sample; q < shape.sample_rows; ++q) {
    p_samples[q] = q;
    put_copy(q, {});
  }
  return texts_at + batch.copy_tokens.size();
}

absl::Status CudaBackend::EnqueueStep(const InFlight& f, const StepShape& shape,
                                      const StepInputLayout& at, size_t ints) {
  cudaStream_t st = stream_.get();
  const int ev = static_cast<int>(f.step % kEventRing);
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start_[ev].get(), st), "record start"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(inputs_.get(), pinned_in_[f.slot].get(),
                                             ints * sizeof(int32_t), cudaMemcpyHostToDevice, st),
                             "copy step inputs"));
  if (shape.replay) {
    RETURN_IF_ERROR(graphs_[shape.bucket].Launch(st));
    ++stats_.graph_steps;
  } else {
    RETURN_IF_ERROR(EnqueueForward(shape.rows, shape.sample_rows, DeviceInputs(at)));
  }
  RETURN_IF_ERROR(EnqueueOutputCopies(f));
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(done_[ev].get(), st), "record done"));
  event_step_[ev] = f.step;
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueOutputCopies(const InFlight& f) {
  if (f.sampled == 0) return absl::OkStatus();
  cudaStream_t st = stream_.get();
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(pinned_tokens_[f.slot].get(), out_tokens_.get(),
                                 f.sampled * sizeof(int32_t), cudaMemcpyDeviceToHost, st),
                 "copy next tokens"));
  if (!f.logits) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(f.sampled) * config_.vocab_size * sizeof(float);
  if (pinned_logits_[f.slot].bytes() < bytes) {
    RETURN_IF_ERROR(pinned_logits_[f.slot].Allocate(bytes));
  }
  return CudaStatus(cudaMemcpyAsync(pinned_logits_[f.slot].get(), logits_.get(), bytes,
                                    cudaMemcpyDeviceToHost, st),
                    "copy logits");
}

void CudaBackend::CaptureGraph(int bucket) {
  // Capturing records work without running it, so this step's work is unaffected; a failure
  // only means this bucket's decode steps stay eager.
  absl::StatusOr<kernels::GraphExec*> g = GraphFor(bucket);
  if (!g.ok()) {
    graph_failed_[bucket] = true;
    spdlog::warn("cuda backend: {}; decode steps of {} rows run eagerly",
                 std::string(g.status().message()), buckets_[bucket]);
  }
}

absl::Status CudaBackend::Collect(StepResult* result) {
  if (in_flight_.empty()) return absl::FailedPreconditionError("Collect: no step in flight");
  const InFlight f = in_flight_.front();
  in_flight_.pop_front();
  result->next_tokens.clear();
  result->logits.clear();
  if (f.empty) return absl::OkStatus();
  const int ev = static_cast<int>(f.step % kEventRing);
  RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(done_[ev].get()), "step execution"));
  // Surface asynchronous kernel faults here rather than at some later call.
  RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "step kernels"));
  const int32_t* tokens = pinned_tokens_[f.slot].as<int32_t>();
  result->next_tokens.assign(tokens, tokens + f.sampled);
  if (f.logits && f.sampled > 0) {
    const float* logits = pinned_logits_[f.slot].as<float>();
    result->logits.assign(logits, logits + static_cast<size_t>(f.sampled) * config_.vocab_size);
  }
  ++stats_.steps;
  float busy = 0.0f;
  if (cudaEventElapsedTime(&busy, start_[ev].get(), done_[ev].get()) == cudaSuccess) {
    stats_.device_busy_ms += busy;
  }
  // The previous step's events are still in the ring (at most kSlots steps in flight) unless
  // it was empty (no device work, no events).
  const int prev = static_cast<int>((f.step + kEventRing - 1) % kEventRing);
  if (f.step > 0 && event_step_[prev] == f.step - 1) {
    float gap = 0.0f;
    if (cudaEventElapsedTime(&gap, done_[prev].get(), start_[ev].get()) == cudaSuccess &&
        gap > 0.0f) {
      stats_.device_idle_ms += gap;
      if (gap > 0.02f) ++stats_.idle_gaps;
    }
  }
  return absl::OkStatus();
}

}  // namespace gecd::engine

#ifndef GECD_ENGINE_CPU_BACKEND_H_
#define GECD_ENGINE_CPU_BACKEND_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/zeroed_pages.h"
#include "cpu_matmul/matmul.h"
#include "engine/backend.h"
#include "engine/cpu_linear.h"
#include "model/checkpoint.h"

// The CPU forward pass of the Llama / Qwen2 / Mistral family: embeddings, RMSNorm, RoPE
// (rope_theta, llama3 scaling), grouped-query attention over a paged f32 KV cache, SwiGLU MLP,
// tied or untied lm_head, Qwen2's q/k/v biases, and FP8 (compressed-tensors) Linears as
// described in engine/cpu_linear.h.
//
// All tokens of a step form one [tokens, hidden] matrix so every Linear is one GEMM; only
// attention runs per sequence. Weights are converted to f32 once, at Create (then, for oneDNN's
// int8 or bf16 matmuls, to their precision, the f32 copy dropped); every buffer a
// step needs is allocated there too, sized by max_step_tokens / max_batch_size, so Forward
// allocates nothing (verify rows run the lm_head in groups of max_batch_size). Not thread-safe;
// BLAS parallelises each GEMM.
namespace gecd::engine {

// RoPE inverse frequencies [head_dim / 2]: 1 / theta^(2i / head_dim), llama3-adjusted when
// configured (transformers' _compute_llama3_parameters, in f32). Shared with the cuda backend.
std::vector<float> RopeInverseFrequencies(const model::ModelConfig& config);

// engine.cpu_matmul: the precision of the matmuls engine.quantization leaves unquantized (all
// of them unless it is int8).
enum class CpuMatmul {
  kF32,   // OpenBLAS sgemm in f32: the numerical oracle (FP8 layers emulated exactly)
  kBf16,  // bf16 weights and activations, f32 sums, through oneDNN; needs AVX512-BF16 or
          // AMX-BF16 under engine.cpu_isa, refused without. FP8 layers stay emulated in f32
  kAuto,  // bf16 where the CPU has it (under engine.cpu_isa), else f32; Describe says which
};

struct CpuBackendOptions {
  int kv_block_size = 16;
  int num_kv_blocks = 0;  // 0: sized from kv_cache_mb
  int kv_cache_mb = 256;
  int max_step_tokens = 2048;
  int max_batch_size = 128;
  int threads = 0;  // OpenBLAS and oneDNN threads (process-wide settings); 0: their defaults
  // engine.quantization int8: every Linear, lm_head too, in int8 W8A8 through oneDNN
  // (engine/cpu_linear.h); needs VNNI. Otherwise the precision `matmul` says, FP8 layers
  // emulated.
  bool int8 = false;
  // engine.cpu_matmul, for the Linears int8 does not take (all of them when int8 is off). The
  // options' default is the oracle; the config's (configs/gecd.yaml) is auto.
  CpuMatmul matmul = CpuMatmul::kF32;
  // engine.cpu_isa: "auto" or the highest ISA oneDNN's kernels may use (cpu_matmul/cpu_isa.h).
  std::string cpu_isa = "auto";
};

class CpuBackend final : public Backend {
 public:
  // Reads every weight it needs; `checkpoint` may be closed afterwards. A KV cache larger than
  // the memory this process may use (common/memory_limit.h), or one that cannot be allocated,
  // is ResourceExhausted naming engine.kv_cache_mb or engine.kv_cache_blocks and the bytes.
  // Builds on a thread of its own, which ends before Create returns, so the caller's thread
  // keeps no OpenMP threads for steps that run on another (cpu_backend.cc says why it matters).
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const model::Checkpoint& checkpoint,
                                                            const CpuBackendOptions& options);

  const model::ModelConfig& config() const override { return config_; }
  const KvCacheLayout& kv_layout() const override { return layout_; }
  int max_step_tokens() const override { return max_step_tokens_; }
  int max_batch_size() const override { return max_batch_size_; }
  bool verifies_drafts() const override { return true; }
  absl::Status Forward(const StepBatch& batch, StepResult* result) override;
  // "cpu, f32 matmuls: OpenBLAS <core> kernels" or "cpu, int8|bf16 matmuls: oneDNN <kernel>
  // kernels", and oneDNN's ISA: which kernels the matmuls run (and, when engine.cpu_matmul auto
  // fell back to f32, why).
  std::string Describe() const override;

 private:
  // Create's work, on the calling thread.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Build(const model::Checkpoint& checkpoint,
                                                           const CpuBackendOptions& options);
  struct Layer {
    std::vector<float> input_norm;
    std::vector<float> post_attention_norm;
    CpuLinear qkv;  // q, k, v rows concatenated
    CpuLinear o;
    CpuLinear gate_up;  // gate rows then up rows
    CpuLinear down;
  };

  CpuBackend() = default;
  // Fixes oneDNN's ISA (engine.cpu_isa), checks it can run options' quantization and
  // engine.cpu_matmul, and sets onednn_precision_ (or f32_reason_ when auto falls back).
  absl::Status SelectIsa(const CpuBackendOptions& options);
  // The per-step activations, logits and GEMM scratch for options' step and batch sizes.
  absl::Status AllocateStepBuffers(const CpuBackendOptions& options);
  // Checks the batch and fills tokens_ with its tokens, previous_sample entries filled in.
  absl::Status Validate(const StepBatch& batch);
  void ComputeRope(const StepBatch& batch);
  void ApplyRopeAndStore(const StepBatch& batch, int layer);
  void Attention(const StepBatch& batch, int layer);
  // x_ += down(silu(gate) * up) of h_'s rows, gate and up from one gate_up matmul.
  void Mlp(const Layer& layer, int tokens);
  // h_ = RMSNorm(x_) for the step's tokens.
  void NormRows(const std::vector<float>& weight, int tokens);
  // Token t of ApplyRopeAndStore and of Attention, on `scores` ([query heads per KV head,
  // max_context]) of the worker running it.
  void RopeAndStoreToken(const StepBatch& batch, int layer, int t);
  void AttendToken(const StepBatch& batch, int layer, int t, float* scores);
  // Gives each of `workers` row workers (ForEachRow in cpu_backend.cc) its scores_ and its row
  // of gate_up_, act_ and logits_ where a step goes row by row.
  void SizeRowWorkspaces(int workers);
  // A block's keys, transposed: [kv head][dim][slot] (ApplyRopeAndStore writes them so).
  float* KeyBlock(int layer, int block) {
    return k_cache_.as<float>() + (static_cast<size_t>(layer) * layout_.num_blocks + block) *
                                      layout_.block_size * kv_width_;
  }
  // A position's values: [kv head][dim], one row per slot.
  float* ValueSlot(int layer, int block, int slot) {
    return v_cache_.as<float>() +
           ((static_cast<size_t>(layer) * layout_.num_blocks + block) * layout_.block_size + slot) *
               kv_width_;
  }

  model::ModelConfig config_;
  KvCacheLayout layout_;
  int max_step_tokens_ = 0;
  int max_batch_size_ = 0;
  int max_context_ = 0;  // longest sequence the cache and the position limit allow
  // engine.threads: oneDNN's OpenMP threads, set again on whichever thread computes a step
  // (OpenMP's thread count is per thread); 0 leaves OpenMP's default.
  int threads_ = 0;
  int q_width_ = 0;              // heads * head_dim
  int kv_width_ = 0;             // kv_heads * head_dim
  std::vector<float> inv_freq_;  // [head_dim / 2], llama3-adjusted when configured
  std::string onednn_isa_;       // the ISA oneDNN's kernels use; "" in a build without oneDNN
  // The precision oneDNN runs the Linears in; none: OpenBLAS f32.
  std::optional<cpu_matmul::Precision> onednn_precision_;
  std::string f32_reason_;  // why engine.cpu_matmul auto runs f32; "" otherwise

  std::vector<float> embed_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  CpuLinear lm_head_;

  // float [layer][block][slot][kv_head][head_dim]
  ZeroedPages k_cache_;
  ZeroedPages v_cache_;

  // Step workspaces.
  std::vector<float> x_;     // [tokens, hidden] residual stream
  std::vector<float> h_;     // [tokens, hidden] normed input of a sub-layer
  std::vector<float> qkv_;   // [tokens, q_width + 2 kv_width]
  std::vector<float> attn_;  // [tokens, q_width]
  // [tokens, 2 intermediate] and [tokens, intermediate]; when oneDNN runs the MLP one row per
  // row worker (Mlp goes row by row).
  std::vector<float> gate_up_;
  std::vector<float> act_;
  std::vector<float> rope_cos_;  // [tokens, head_dim / 2]
  std::vector<float> rope_sin_;
  std::vector<float> scores_;  // [row worker][query heads per KV head, max_context]
  size_t scores_per_worker_ = 0;
  int row_workers_ = 0;          // the row workers the workspaces are sized for
  std::vector<float> last_;      // [batch, hidden] final hidden state of sampling rows
  std::vector<float> logits_;    // [batch, vocab]; a row per row worker when oneDNN runs lm_head
  std::vector<int32_t> tokens_;  // the batch's tokens, previous_sample entries filled in
  std::vector<int> token_sequence_;  // each token's sequence (index in StepBatch::sequences)
  // Per sampling position: its row in x_, its copy candidate (-1: none) and bias.
  std::vector<int> sample_rows_;
  std::vector<int32_t> sample_candidates_;
  std::vector<float> sample_bias_;
  std::vector<int32_t> previous_next_tokens_;  // the last Forward's next_tokens
  LinearScratch scratch_;
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_CPU_BACKEND_H_

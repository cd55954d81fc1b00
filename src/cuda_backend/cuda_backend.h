#ifndef GECD_CUDA_BACKEND_CUDA_BACKEND_H_
#define GECD_CUDA_BACKEND_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuda_backend/cuda_step_inputs.h"
#include "cuda_backend/cuda_weights.h"
#include "engine/backend.h"
#include "kernels/cuda_util.h"
#include "kernels/gemm.h"
#include "kernels/sampling.h"
#include "model/checkpoint.h"

// The GPU forward pass of the Llama / Qwen2 / Mistral family on one CUDA device, numerically
// the CPU backend's (engine/cpu_backend.h) with bf16 storage: f32 residual stream, bf16
// activations and paged KV cache, cuBLASLt GEMMs (bf16, or FP8 e4m3 per token × per output
// channel as in common/numerics.h), fused RMSNorm/SwiGLU/quantization kernels (kernels/).
//
// One step: the host validates the batch and writes every per-token input (tokens,
// previous-sample indices, positions, block-table offsets, sampled rows, block ids) into a
// pinned buffer, copied with one cudaMemcpyAsync; the device runs the layers, the LM head
// (bf16, f32 logits) on the sampled rows only, and argmax; only token ids come back (logits
// too when StepBatch::return_logits). Tokens sampled by the previous step are read on the device
// from its output buffer, so step N+1 can be submitted before step N's tokens reach the host.
// Decode-only steps replay a CUDA graph captured (lazily) per batch-size bucket; padded rows
// write their K/V to a scratch block outside the engine's pool. Not thread-safe.
namespace gecd::engine {

struct CudaBackendOptions {
  int device = 0;
  double kv_cache_memory_fraction = 0.5;  // of device memory free after weights
  int kv_block_size = 16;
  int max_step_tokens = 8192;
  int max_batch_size = 512;
  std::vector<int> graph_batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};  // empty: no graphs
  // kFp8 quantizes bf16/f32 checkpoints at load (per-channel, common/numerics
  // QuantizeRowsE4m3); FP8 checkpoints are used as they are; kNone keeps bf16 (dequantizing
  // FP8 checkpoints).
  enum class Quantization { kNone, kFp8 } quantization = Quantization::kFp8;
  bool attention_fp8 = true;  // false: q/k/v/o stay bf16 (hybrid)
  enum class Fp8Scaling { kPerChannel, kPerTensor } fp8_scaling = Fp8Scaling::kPerChannel;
  // true: Submit returns once the step is enqueued; false: Submit waits for the device, so a
  // pipelined driver gets no overlap (for A/B comparisons).
  bool async = true;
  int num_kv_blocks = 0;  // > 0: exactly this many blocks instead of the memory fraction (tests)
};

// Counters since Create; the benchmark reports them.
struct CudaBackendStats {
  int64_t steps = 0;
  int64_t graph_steps = 0;  // replayed a captured graph
  int64_t graphs_captured = 0;
  double device_busy_ms = 0.0;  // from each step's first to last device operation
  double device_idle_ms = 0.0;  // between one step's end and the next one's start
  int64_t idle_gaps = 0;        // gaps over 20 µs between back-to-back steps
};

class CudaBackend final : public Backend {
 public:
  // Uploads every weight (CudaWeights::Load, quantizing / fusing as the options say);
  // `checkpoint` may be closed afterwards. Errors: no device, an unsupported shape, out of
  // memory (for the KV cache: ResourceExhausted naming engine.kv_cache_memory_fraction or
  // engine.kv_cache_blocks).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const model::Checkpoint& checkpoint,
                                                             const CudaBackendOptions& options);
  ~CudaBackend() override;

  const model::ModelConfig& config() const override { return config_; }
  const KvCacheLayout& kv_layout() const override { return layout_; }
  int max_step_tokens() const override { return max_step_tokens_; }
  int max_batch_size() const override { return max_batch_size_; }
  absl::Status Forward(const StepBatch& batch, StepResult* result) override;
  absl::Status Submit(const StepBatch& batch) override;
  absl::Status Collect(StepResult* result) override;
  int max_in_flight() const override { return kSlots; }
  bool asynchronous() const override { return options_.async; }

  // Benchmark A/B switches, effective from the next Submit: graph replay for decode steps, and
  // the async option (see CudaBackendOptions).
  void set_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }
  void set_async(bool async) { options_.async = async; }
  void ResetStats() { stats_ = {}; }

  const CudaBackendStats& stats() const { return stats_; }
  // One line: device, quantization, GEMM path, graphs, KV cache size.
  std::string Describe() const override;
  // One line of stats(): steps, graph replays, device busy and idle time.
  std::string StatsSummary() const override;

 private:
  static constexpr int kSlots = 2;      // steps in flight (pinned input/output buffers)
  static constexpr int kEventRing = 4;  // step events kept, so gaps span two steps

  // A GEMM input: bf16 rows, or e4m3 rows with their scales (one per row, or one in all).
  struct Act {
    const uint16_t* bf16 = nullptr;
    const uint8_t* fp8 = nullptr;
    const float* scale = nullptr;
  };
  // Where one step's inputs are on the device (StepInputLayout's offsets from `base`).
  // Copy texts lie anywhere in the inputs; a CopyRow's text_offset counts from `base`.
  struct StepInputs {
    const int32_t* base;
    const int32_t* tokens;
    const int32_t* prev_index;
    const int32_t* positions;
    const int32_t* table_offsets;
    const int32_t* sample_rows;
    const kernels::CopyRow* copy_rows;
    const int32_t* block_ids;
  };
  struct InFlight {
    int slot = 0;
    int64_t step = 0;
    int sampled = 0;
    bool empty = false;
    bool logits = false;
  };

  // How one step runs: its graph bucket (-1: none) and whether it replays that bucket's
  // captured graph, its token rows (padded) and its sampled rows (padded to the graph's).
  struct StepShape {
    int bucket = -1;
    bool replay = false;
    int rows = 0;
    int sample_rows = 0;
  };

  CudaBackend() = default;
  // Create's steps, in order.
  absl::Status Init(const model::Checkpoint& checkpoint, const CudaBackendOptions& options);
  static absl::Status CheckShapeAndOptions(const model::Checkpoint& checkpoint,
                                           const CudaBackendOptions& options);
  static absl::Status SelectDevice(int device);
  // options_, config_ and the widths derived from them.
  void SetShape(const model::ModelConfig& c, const CudaBackendOptions& options);
  absl::Status AllocateWorkspaces();  // the step workspaces, for max_step_tokens / batch size
  // The KV cache (layout_, max_context_): what num_kv_blocks says, or a fraction of what is free.
  absl::Status AllocateKvCache();
  // The step inputs, the pinned output slots and the step events.
  absl::Status AllocateStepBuffers();
  void SetGraphBuckets();  // buckets_ from options_.graph_batch_sizes

  // Submit's steps, in order.
  // The graph bucket an all-decode step fits (a graph not failed), or -1.
  int DecodeBucket(const StepBatch& batch) const;
  StepShape ShapeFor(const StepBatch& batch, int sampled) const;
  // Writes the step's inputs into `pin` as `at` lays them out; the ints written.
  size_t PackInputs(const StepBatch& batch, const StepShape& shape, const StepInputLayout& at,
                    int32_t* pin) const;
  // Enqueues the step's input copy, its forward pass (or graph), its output copies and events.
  absl::Status EnqueueStep(const InFlight& f, const StepShape& shape, const StepInputLayout& at,
                           size_t ints);
  absl::Status EnqueueOutputCopies(const InFlight& f);  // the samples (and logits) to the host
  void CaptureGraph(int bucket);  // after the bucket's first (eager) step; a failure is logged
  absl::Status Validate(const StepBatch& batch, int* sampled) const;
  // The device copy of the step inputs, as `at` lays them out.
  StepInputs DeviceInputs(const StepInputLayout& at) const;
  // Enqueues the whole forward pass for `rows` tokens of which `sampled` rows sample.
  absl::Status EnqueueForward(int rows, int sampled, const StepInputs& in);
  absl::Status LinearForward(const CudaLinear& l, const Act& in, int rows, uint16_t* y);
  // Writes the activation a consumer Linear needs from a producer that can emit bf16 and/or
  // per-row FP8: for per-tensor FP8 it quantizes the bf16 output in a second pass.
  absl::Status FinishAct(bool fp8, uint16_t* bf16, int rows, int cols, Act* act);
  absl::StatusOr<kernels::GraphExec*> GraphFor(int bucket);
  // Sizes the step inputs for `copy_ints` copy-text tokens. Growing waits for the device and
  // drops the captured graphs (they hold the old buffer's address).
  absl::Status ReserveInputs(size_t copy_ints);

  model::ModelConfig config_;
  KvCacheLayout layout_;
  CudaBackendOptions options_;
  int max_step_tokens_ = 0;
  int max_batch_size_ = 0;
  int max_context_ = 0;
  int q_width_ = 0, kv_width_ = 0, qkv_width_ = 0;
  int max_block_ids_ = 0;  // block ids one step may carry
  bool per_tensor_ = false;
  size_t device_total_memory_ = 0;

  kernels::Stream stream_;
  kernels::GemmRunner gemm_;

  CudaWeights weights_;
  kernels::DeviceBuffer k_cache_, v_cache_;  // bf16 [layer][num_blocks + 1][block][kv_w]

  // Step workspaces, sized for max_step_tokens / max_batch_size.
  kernels::DeviceBuffer x_;           // f32 [T, hidden]
  kernels::DeviceBuffer h_;           // bf16 [T, max(hidden, inter, q_width)]
  kernels::DeviceBuffer h_fp8_;       // e4m3 [T, max(hidden, inter, q_width)]
  kernels::DeviceBuffer h_scale_;     // f32 [T] (or [1] per tensor)
  kernels::DeviceBuffer amax_;        // f32 [1], per-tensor scratch
  kernels::DeviceBuffer qkv_;         // bf16 [T, qkv_width]
  kernels::DeviceBuffer q_;           // bf16 [T, q_width]
  kernels::DeviceBuffer attn_;        // bf16 [T, q_width]
  kernels::DeviceBuffer delta_;       // bf16 [T, hidden]: o_proj / down_proj output
  kernels::DeviceBuffer gate_up_;     // bf16 [T, 2 inter]
  kernels::DeviceBuffer gemm_acc_;    // f32 [T, max out]: the FP8 fallback's accumulator
  kernels::DeviceBuffer last_;        // bf16 [B, hidden]
  kernels::DeviceBuffer logits_;      // f32 [B, vocab]
  kernels::DeviceBuffer out_tokens_;  // int32 [B]: the last step's samples (read by the next)
  kernels::DeviceBuffer resolved_;    // int32 [T]: each row's input token, resolved on the device
  kernels::DeviceBuffer candidate_;   // int32 [B]: each sampled row's copy candidate
  kernels::DeviceBuffer copy_bias_;   // f32 [B]: its bias
  kernels::DeviceBuffer inputs_;      // int32: the step inputs (StepInputLayout)
  size_t fixed_input_ints_ = 0;       // StepInputLayout::FixedInts for the largest step
  size_t copy_ints_ = 0;              // room for copy texts after it

  kernels::PinnedBuffer pinned_in_[kSlots];
  kernels::PinnedBuffer pinned_tokens_[kSlots];
  kernels::PinnedBuffer pinned_logits_[kSlots];
  kernels::Event start_[kEventRing], done_[kEventRing];
  int64_t event_step_[kEventRing] = {-1, -1, -1, -1};  // the step whose events a slot holds

  std::vector<int> buckets_;                // sorted graph batch sizes
  std::vector<kernels::GraphExec> graphs_;  // parallel to buckets_
  std::vector<bool> graph_failed_;
  bool graphs_enabled_ = true;

  std::deque<InFlight> in_flight_;
  int64_t next_step_ = 0;
  int last_sampled_ = 0;  // samples of the last submitted step (previous_sample bound)
  CudaBackendStats stats_;
};

}  // namespace gecd::engine

#endif  // GECD_CUDA_BACKEND_CUDA_BACKEND_H_

#include "engine/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <numbers>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/memory_limit.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "engine/step_profile.h"
#include "engine/vector_clones.h"
#include "engine/vector_math.h"
#ifdef GECD_HAVE_ONEDNN
#include "cpu_matmul/cpu_isa.h"
#endif

namespace gecd::engine {
namespace {

// HF's RMSNorm of one row: x * rsqrt(mean(x²) + eps), then times the weight. One serial sum, as
// the FP8 tests' naive reference sums (a reordered sum moves activations across e4m3 rounding
// steps).
void RmsNorm(const float* x, const float* weight, int dim, float eps, float* out) {
  float sum = 0.0f;
  for (int i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
  for (int i = 0; i < dim; ++i) out[i] = weight[i] * (x[i] * inv);
}

// out = silu(gate) * up, silu(g) = g / (1 + e^-g).
GECD_VECTOR_CLONES void SiluTimes(const float* __restrict gate, const float* __restrict up, int n,
                                  float* __restrict out) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + ExpApprox(-gate[i])) * up[i];
}

// Runs f(worker, row) for each row in [0, rows): with oneDNN on its OpenMP threads, `chunk` rows
// at a time to whichever is free (cpu_matmul::ParallelRows), else in order on this thread. The
// step's parts between its matmuls ran on one thread while the other core idled (59% of the step
// on an AMX box, 2026-12-05); and a thread the OS lends to a worker or a client mid-loop holds up
// only its own rows. Every row computes the same bits on any thread.
template <typename F>
void ForEachRow(int rows, int chunk, F&& f) {
#ifdef GECD_HAVE_ONEDNN
  cpu_matmul::ParallelRows(rows, chunk, f);
#else
  for (int row = 0; row < rows; ++row) f(0, row);
#endif
}

// Rows handed out at a time where a row is little work (a norm, a token's RoPE).
constexpr int kRowChunk = 16;

// How many workers ForEachRow may run on from this thread.
int RowWorkers() {
#ifdef GECD_HAVE_ONEDNN
  return cpu_matmul::ParallelWorkers();
#else
  return 1;
#endif
}

}  // namespace

// inv_freq[i] = 1 / theta^(2i / head_dim), then, for rope_scaling "llama3", transformers'
// _compute_llama3_parameters: long wavelengths divided by `factor`, short ones kept, the band
// between interpolated. Computed in f32 like transformers so positions rotate identically.
std::vector<float> RopeInverseFrequencies(const model::ModelConfig& config) {
  const int half = config.head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim);
    inv_freq[i] = 1.0f / std::pow(config.rope_theta, exponent);
  }
  const model::RopeScaling& s = config.rope_scaling;
  if (s.type != "llama3") return inv_freq;
  const float old_context = static_cast<float>(s.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / s.low_freq_factor;
  const float high_freq_wavelen = old_context / s.high_freq_factor;
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    const float scaled = wavelen > low_freq_wavelen ? f / s.factor : f;
    if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) {
      f = scaled;
      continue;
    }
    const float smooth =
        (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1.0f - smooth) * scaled / s.factor + smooth * scaled;
  }
  return inv_freq;
}

namespace {

absl::StatusOr<CpuLinear> LoadLinear(const model::Checkpoint& checkpoint,
                                     const std::vector<std::string>& modules, int64_t out,
                                     int64_t in) {
  std::vector<model::LinearWeight> parts;
  for (const std::string& m : modules) {
    ASSIGN_OR_RETURN(model::LinearWeight w, checkpoint.Linear(m));
    parts.push_back(std::move(w));
  }
  ASSIGN_OR_RETURN(CpuLinear linear, CpuLinear::Fuse(parts));
  if (linear.out_features() != out || linear.in_features() != in) {
    return absl::InvalidArgumentError(absl::StrCat(modules[0], ": expected [", out, ", ", in,
                                                   "], got [", linear.out_features(), ", ",
                                                   linear.in_features(), "]"));
  }
  return linear;
}

// Attention's two inner products, inlined into Attention's vector clones. The Fixed forms keep
// their sums in vector registers (a block's slots, a head's dims); the others serve any block
// size and head dimension. Both sum in the same order, so they compute the same bits.

// One query head's scores against one block of keys: sc[x] = scale * sum over d, in order, of
// q[d] * keys[d][x], for the block's first n slots; keys transposed ([dim][slot]).
struct ScoreJob {
  const float* q;
  const float* keys;
  float* sc;
  int n;
};

// kJobs jobs over blocks of kSlots slots at once: each job's sums stay in a vector register and
// the jobs' chains of adds overlap (one chain alone waits an add's latency per dim). Computes
// all kSlots of a block and keeps n.
template <int kSlots, int kJobs>
[[gnu::always_inline]] inline void BlockScoresFixed(const ScoreJob* jobs, int hd, float scale) {
  float acc[kJobs][kSlots];
#pragma GCC unroll 4
  for (int k = 0; k < kJobs; ++k) {
    for (int x = 0; x < kSlots; ++x) acc[k][x] = jobs[k].q[0] * jobs[k].keys[x];
  }
  for (int d = 1; d < hd; ++d) {
#pragma GCC unroll 4
    for (int k = 0; k < kJobs; ++k) {
      const float qd = jobs[k].q[d];
      const float* kd = jobs[k].keys + static_cast<size_t>(d) * kSlots;
      for (int x = 0; x < kSlots; ++x) acc[k][x] += qd * kd[x];
    }
  }
#pragma GCC unroll 4
  for (int k = 0; k < kJobs; ++k) {
    for (int x = 0; x < jobs[k].n; ++x) jobs[k].sc[x] = acc[k][x] * scale;
  }
}

[[gnu::always_inline]] inline void BlockScores(const ScoreJob& job, int hd, int bs, float scale) {
  float* __restrict sc = job.sc;
  for (int x = 0; x < job.n; ++x) sc[x] = job.q[0] * job.keys[x];
  for (int d = 1; d < hd; ++d) {
    const float qd = job.q[d];
    const float* __restrict kd = job.keys + static_cast<size_t>(d) * bs;
    for (int x = 0; x < job.n; ++x) sc[x] += qd * kd[x];
  }
  for (int x = 0; x < job.n; ++x) sc[x] *= scale;
}

[[gnu::always_inline]] inline void RunScoreJobs(const ScoreJob* jobs, int count, int hd, int bs,
                                                float scale) {
  int k = 0;
  if (bs == 16) {
    for (; k + 4 <= count; k += 4) BlockScoresFixed<16, 4>(jobs + k, hd, scale);
    for (; k < count; ++k) BlockScoresFixed<16, 1>(jobs + k, hd, scale);
  }
  for (; k < count; ++k) BlockScores(jobs[k], hd, bs, scale);
}

// The largest of v[0..n), n >= 1: std::max_element's value for numbers, in 16 lanes (one chain of
// compares waits a compare's latency per element).
[[gnu::always_inline]] inline float MaxOf(const float* v, int n) {
  float lanes[16];
  for (int x = 0; x < 16; ++x) lanes[x] = v[0];
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    for (int x = 0; x < 16; ++x) lanes[x] = v[j + x] > lanes[x] ? v[j + x] : lanes[x];
  }
  float m = v[0];
  for (int x = 0; x < 16; ++x) m = lanes[x] > m ? lanes[x] : m;
  for (; j < n; ++j) m = v[j] > m ? v[j] : m;
  return m;
}

// Where a sequence's value rows are: row j of the sequence's head is
// base + blocks[j / bs] * block_stride + (j % bs) * row_stride.
struct ValueRows {
  const float* base;
  const int32_t* blocks;
  size_t block_stride;
  int bs;
  int row_stride;
};

// out[d] = sum over j < context, in order, of p[j] * v_j[d].
template <int kDim>
[[gnu::always_inline]] inline void WeightedValuesFixed(const float* p, int context,
                                                       const ValueRows& rows, float* out) {
  float acc[kDim] = {};
  for (int j = 0, b = 0; j < context; ++b) {
    const float* v = rows.base + rows.blocks[b] * rows.block_stride;
    for (const int end = std::min(context, j + rows.bs); j < end; ++j, v += rows.row_stride) {
      const float w = p[j];
      for (int d = 0; d < kDim; ++d) acc[d] += w * v[d];
    }
  }
  std::copy_n(acc, kDim, out);
}

[[gnu::always_inline]] inline void WeightedValues(const float* p, int context, int hd,
                                                  const ValueRows& rows, float* __restrict out) {
  switch (hd) {
    case 32:
      return WeightedValuesFixed<32>(p, context, rows, out);
    case 64:
      return WeightedValuesFixed<64>(p, context, rows, out);
    case 128:
      return WeightedValuesFixed<128>(p, context, rows, out);
    default:
      break;
  }
  std::fill_n(out, hd, 0.0f);
  for (int j = 0, b = 0; j < context; ++b) {
    const float* __restrict v = rows.base + rows.blocks[b] * rows.block_stride;
    for (const int end = std::min(context, j + rows.bs); j < end; ++j, v += rows.row_stride) {
      const float w = p[j];
      for (int d = 0; d < hd; ++d) out[d] += w * v[d];
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const model::Checkpoint& checkpoint,
                                                               const CpuBackendOptions& options) {
  // libgomp keeps a pool of OpenMP threads for every thread that has opened a parallel region,
  // for as long as that thread lives, and once the pools' threads outnumber the CPUs it spins
  // only ~100 times at a barrier before it sleeps on a futex. Building reorders the weights
  // through oneDNN's parallel regions; the steps run on another thread (the engine's compute
  // thread). Built on the engine's main thread, the idle pool it left made every parallel
  // region of every step sleep and wake: 1.98 ms a step at batch 1 against 0.56 (2026-12-06,
  // bench/RESULTS.md). Built on a thread that ends here, its pool ends with it.
  absl::StatusOr<std::unique_ptr<CpuBackend>> built;
  std::thread([&] { built = Build(checkpoint, options); }).join();
  return built;
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Build(const model::Checkpoint& checkpoint,
                                                              const CpuBackendOptions& options) {
  const model::ModelConfig& c = checkpoint.config();
  if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
      c.num_key_value_heads <= 0 || c.head_dim <= 0 || c.head_dim % 2 != 0 || c.vocab_size <= 0 ||
      c.intermediate_size <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.dir(), ": unsupported model shape (heads ", c.num_attention_heads,
                     ", kv heads ", c.num_key_value_heads, ", head_dim ", c.head_dim, ")"));
  }
  if (options.kv_block_size <= 0 || options.max_step_tokens <= 0 || options.max_batch_size <= 0) {
    return absl::InvalidArgumentError(
        "CpuBackend: kv_block_size, max_step_tokens and max_batch_size must be positive");
  }
  auto b = std::unique_ptr<CpuBackend>(new CpuBackend());
  RETURN_IF_ERROR(b->SelectIsa(options));
  b->config_ = c;
  b->layout_ = {.num_layers = c.num_hidden_layers,
                .num_kv_heads = c.num_key_value_heads,
                .head_dim = c.head_dim,
                .block_size = options.kv_block_size};
  b->layout_.num_blocks = options.num_kv_blocks > 0
                              ? options.num_kv_blocks
                              : KvBlocksForBudget(b->layout_, sizeof(float), options.kv_cache_mb);
  if (b->layout_.num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CpuBackend: a KV cache of ", options.kv_cache_mb, " MB holds no block"));
  }
  // The key the cache's size came from names it in errors. Checked before the weights load: a
  // cache larger than the memory this process may use would fail to allocate or, touched,
  // bring the OOM killer.
  const char* kv_key = options.num_kv_blocks > 0 ? "engine.kv_cache_blocks" : "engine.kv_cache_mb";
  const uint64_t block_bytes = static_cast<uint64_t>(b->layout_.ElementsPerBlock()) * sizeof(float);
  const uint64_t kv_bytes = block_bytes * static_cast<uint64_t>(b->layout_.num_blocks);
  if (const MemoryLimit& memory = ProcessMemoryLimit(); kv_bytes > memory.bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(kv_key, ": a KV cache of ", b->layout_.num_blocks, " blocks x ", block_bytes,
                     " bytes (", kv_bytes, " bytes) exceeds the memory this process may use (",
                     memory.bytes, " bytes, ", memory.source, ")"));
  }
  b->max_step_tokens_ = options.max_step_tokens;
  b->max_batch_size_ = std::min(options.max_batch_size, options.max_step_tokens);
  b->threads_ = options.threads;
  int64_t max_context = b->layout_.capacity_tokens();
  if (c.max_position_embeddings > 0) {
    max_context = std::min<int64_t>(max_context, c.max_position_embeddings);
  }
  b->max_context_ = static_cast<int>(max_context);
  b->q_width_ = c.num_attention_heads * c.head_dim;
  b->kv_width_ = c.num_key_value_heads * c.head_dim;
  b->inv_freq_ = RopeInverseFrequencies(c);

  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  ASSIGN_OR_RETURN(b->embed_,
                   checkpoint.FloatTensor("model.embed_tokens.weight", c.vocab_size * hidden));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    Layer layer;
    ASSIGN_OR_RETURN(layer.input_norm,
                     checkpoint.FloatTensor(p + "input_layernorm.weight", hidden));
    ASSIGN_OR_RETURN(layer.post_attention_norm,
                     checkpoint.FloatTensor(p + "post_attention_layernorm.weight", hidden));
    ASSIGN_OR_RETURN(layer.qkv, LoadLinear(checkpoint,
                                           {p + "self_attn.q_proj", p + "self_attn.k_proj",
                                            p + "self_attn.v_proj"},
                                           b->q_width_ + 2 * b->kv_width_, hidden));
    ASSIGN_OR_RETURN(layer.o,
                     LoadLinear(checkpoint, {p + "self_attn.o_proj"}, hidden, b->q_width_));
    ASSIGN_OR_RETURN(layer.gate_up, LoadLinear(checkpoint, {p + "mlp.gate_proj", p + "mlp.up_proj"},
                                               2 * inter, hidden));
    ASSIGN_OR_RETURN(layer.down, LoadLinear(checkpoint, {p + "mlp.down_proj"}, hidden, inter));
    b->layers_.push_back(std::move(layer));
  }
  ASSIGN_OR_RETURN(b->final_norm_, checkpoint.FloatTensor("model.norm.weight", hidden));
  if (c.tie_word_embeddings) {
    b->lm_head_ = CpuLinear::Dense(b->embed_, c.vocab_size, c.hidden_size);
  } else {
    ASSIGN_OR_RETURN(b->lm_head_, LoadLinear(checkpoint, {"lm_head"}, c.vocab_size, hidden));
  }

  ProcessStartup().Mark("weights");
  if (b->onednn_precision_.has_value()) {
    const cpu_matmul::Precision precision = *b->onednn_precision_;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      Layer& layer = b->layers_[l];
      const std::string p = absl::StrCat("model.layers.", l, ".");
      RETURN_IF_ERROR(layer.qkv.ToOneDnn(precision, p + "self_attn.qkv", b->max_step_tokens_));
      RETURN_IF_ERROR(layer.o.ToOneDnn(precision, p + "self_attn.o_proj", b->max_step_tokens_));
      RETURN_IF_ERROR(layer.gate_up.ToOneDnn(precision, p + "mlp.gate_up", b->max_step_tokens_));
      RETURN_IF_ERROR(layer.down.ToOneDnn(precision, p + "mlp.down_proj", b->max_step_tokens_));
    }
    RETURN_IF_ERROR(b->lm_head_.ToOneDnn(precision, "lm_head", b->max_batch_size_));
    ProcessStartup().Mark(precision == cpu_matmul::Precision::kInt8 ? "int8 quantization"
                                                                    : "bf16 weights");
  }

  const size_t cache = static_cast<size_t>(b->layout_.num_layers) * b->layout_.num_blocks *
                       b->layout_.block_size * b->kv_width_;
  for (ZeroedPages* half : {&b->k_cache_, &b->v_cache_}) {
    absl::StatusOr<ZeroedPages> pages = ZeroedPages::Map(cache * sizeof(float));
    if (!pages.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(kv_key, ": cannot allocate the KV cache (",
                                                       kv_bytes,
                                                       " bytes): ", pages.status().message()));
    }
    *half = *std::move(pages);
  }
  if (absl::Status s = b->AllocateStepBuffers(options); !s.ok()) return s;
  ProcessStartup().Mark("KV cache and step buffers");
  if (options.threads > 0) openblas_set_num_threads(options.threads);
  return b;
}

absl::Status CpuBackend::SelectIsa(const CpuBackendOptions& options) {
  if (options.int8 && options.matmul == CpuMatmul::kBf16) {
    return absl::InvalidArgumentError(
        "engine.cpu_matmul: bf16 with engine.quantization: int8: int8 runs every matmul; set "
        "engine.cpu_matmul auto (or f32), or engine.quantization none for bf16");
  }
#ifdef GECD_HAVE_ONEDNN
  ASSIGN_OR_RETURN(cpu_matmul::CpuIsa isa, cpu_matmul::SelectCpuIsa(options.cpu_isa));
  // Without VNNI oneDNN's int8 kernels multiply through saturating 16-bit steps: wrong sums
  // (cpu_matmul/matmul.h), so asking for int8 there is a configuration to correct.
  if (options.int8 && !isa.int8_dot) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine.quantization: int8 needs VNNI (AVX512-VNNI or AVX-VNNI), but oneDNN's kernels "
        "here run at ",
        isa.name, " (engine.cpu_isa ", options.cpu_isa,
        "); use engine.quantization none for the f32 path"));
  }
  // Likewise bf16 without BF16 dot products: oneDNN would emulate them, slower than f32.
  if (!options.int8 && options.matmul == CpuMatmul::kBf16 && !isa.bf16_dot) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine.cpu_matmul: bf16 needs AVX512-BF16 or AMX-BF16, but oneDNN's kernels here run at ",
        isa.name, " (engine.cpu_isa ", options.cpu_isa,
        "); use engine.cpu_matmul auto or f32 for the f32 path"));
  }
  if (options.int8) {
    onednn_precision_ = cpu_matmul::Precision::kInt8;
  } else if (options.matmul != CpuMatmul::kF32 && isa.bf16_dot) {
    onednn_precision_ = cpu_matmul::Precision::kBf16;
  } else if (options.matmul == CpuMatmul::kAuto) {
    f32_reason_ = absl::StrCat("engine.cpu_matmul auto: no BF16 dot products under engine.cpu_isa ",
                               options.cpu_isa);
  }
  cpu_matmul::SetMatmulThreads(options.threads);
  onednn_isa_ = isa.name;
  return absl::OkStatus();
#else
  if (options.int8) {
    return absl::FailedPreconditionError(
        "engine.quantization: int8, but this gecd was built without oneDNN (-DGECD_ONEDNN=OFF)");
  }
  if (options.matmul == CpuMatmul::kBf16) {
    return absl::FailedPreconditionError(
        "engine.cpu_matmul: bf16, but this gecd was built without oneDNN (-DGECD_ONEDNN=OFF)");
  }
  if (options.cpu_isa != "auto") {
    return absl::FailedPreconditionError(
        absl::StrCat("engine.cpu_isa: ", options.cpu_isa,
                     ", but this gecd was built without oneDNN (-DGECD_ONEDNN=OFF)"));
  }
  if (options.matmul == CpuMatmul::kAuto) {
    f32_reason_ = "engine.cpu_matmul auto: built without oneDNN (-DGECD_ONEDNN=OFF)";
  }
  return absl::OkStatus();
#endif
}

std::string CpuBackend::Describe() const {
  const std::string isa = onednn_isa_.empty() ? "" : absl::StrCat(", oneDNN ISA ", onednn_isa_);
  if (lm_head_.on_onednn()) {
    const bool fp8 = !layers_.empty() && (layers_[0].qkv.is_fp8() || layers_[0].gate_up.is_fp8());
    return absl::StrCat("cpu, ", cpu_matmul::PrecisionName(*onednn_precision_), " matmuls: oneDNN ",
                        lm_head_.onednn_kernel(), " kernels", isa,
                        fp8 ? " (the checkpoint's FP8 layers emulated in f32)" : "");
  }
  // OpenBLAS picks its kernels when it loads, from the CPU or from OPENBLAS_CORETYPE, which
  // some environments set (one of ours sets Haswell, AVX2, on a CPU with AVX-512): say which.
  const char* name = openblas_get_corename();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return absl::StrCat("cpu, f32 matmuls: OpenBLAS ", name == nullptr ? "?" : name, " kernels",
                      forced == nullptr ? "" : " (chosen by OPENBLAS_CORETYPE)", isa,
                      f32_reason_.empty() ? "" : absl::StrCat(" (", f32_reason_, ")"));
}

// Catches at the allocations, so a size the machine cannot hold is an error, not an exception.
absl::Status CpuBackend::AllocateStepBuffers(const CpuBackendOptions& options) try {
  const model::ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const size_t t = options.max_step_tokens;
  x_.resize(t * hidden);
  h_.resize(t * hidden);
  qkv_.resize(t * (q_width_ + 2 * kv_width_));
  attn_.resize(t * q_width_);
  gate_up_.resize(t * 2 * inter);
  act_.resize(t * inter);
  rope_cos_.resize(t * c.head_dim / 2);
  rope_sin_.resize(t * c.head_dim / 2);
  scores_per_worker_ =
      static_cast<size_t>(c.num_attention_heads / c.num_key_value_heads) * max_context_;
  last_.resize(static_cast<size_t>(max_batch_size_) * hidden);
  logits_.resize(static_cast<size_t>(max_batch_size_) * c.vocab_size);
  SizeRowWorkspaces(RowWorkers());
  tokens_.reserve(options.max_step_tokens);
  sample_rows_.reserve(options.max_step_tokens);
  sample_candidates_.reserve(options.max_step_tokens);
  sample_bias_.reserve(options.max_step_tokens);
  previous_next_tokens_.reserve(options.max_step_tokens);
  const int max_in = std::max({c.hidden_size, c.intermediate_size, q_width_});
  const int max_out = std::max(q_width_ + 2 * kv_width_, 2 * c.intermediate_size);
  scratch_.Reserve(options.max_step_tokens, max_in, std::max(max_out, c.hidden_size));
  scratch_.Reserve(max_batch_size_, max_in, c.vocab_size);
  return absl::OkStatus();
} catch (const std::bad_alloc&) {
  return absl::ResourceExhaustedError(
      absl::StrCat("engine.max_step_tokens ", options.max_step_tokens, ", engine.max_batch_size ",
                   options.max_batch_size, ": cannot allocate the step buffers for this model"));
}

absl::Status CpuBackend::Validate(const StepBatch& batch) {
  if (batch.num_tokens() > max_step_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step has ", batch.num_tokens(), " tokens; the backend takes at most ", max_step_tokens_));
  }
  if (batch.num_sampled() > max_batch_size_) {
    return absl::InvalidArgumentError(absl::StrCat("step samples ", batch.num_sampled(),
                                                   " sequences; the backend takes at most ",
                                                   max_batch_size_));
  }
  int expected_offset = 0;
  token_sequence_.clear();
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    RETURN_IF_ERROR(CheckSequence(batch, i, expected_offset, layout_, max_context_));
    expected_offset += batch.sequences[i].num_tokens;
    token_sequence_.insert(token_sequence_.end(), batch.sequences[i].num_tokens,
                           static_cast<int>(i));
  }
  if (expected_offset != batch.num_tokens()) {
    return absl::InvalidArgumentError("step tokens not covered by its sequences");
  }
  tokens_.assign(batch.tokens.begin(), batch.tokens.end());
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchSequence& s = batch.sequences[i];
    if (s.previous_sample < 0) continue;
    if (s.num_tokens != 1 || s.previous_sample >= static_cast<int>(previous_next_tokens_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step sequence ", i, ": previous_sample ", s.previous_sample, " of a ", s.num_tokens,
          "-token entry; the previous step sampled ", previous_next_tokens_.size()));
    }
    tokens_[s.token_offset] = previous_next_tokens_[s.previous_sample];
  }
  RETURN_IF_ERROR(CheckTokenIds(tokens_, config_.vocab_size));
  return CheckTokenIds(batch.copy_tokens, config_.vocab_size);
}

void CpuBackend::ComputeRope(const StepBatch& batch) {
  const int half = config_.head_dim / 2;
  for (const BatchSequence& s : batch.sequences) {
    for (int i = 0; i < s.num_tokens; ++i) {
      const float position = static_cast<float>(s.start_position + i);
      const size_t row = static_cast<size_t>(s.token_offset + i) * half;
      for (int f = 0; f < half; ++f) {
        const float angle = position * inv_freq_[f];
        rope_cos_[row + f] = std::cos(angle);
        rope_sin_[row + f] = std::sin(angle);
      }
    }
  }
}

GECD_VECTOR_CLONES void CpuBackend::RopeAndStoreToken(const StepBatch& batch, int layer, int t) {
  const int hd = config_.head_dim;
  const int half = hd / 2;
  const int stride = q_width_ + 2 * kv_width_;
  const int rotated_heads = config_.num_attention_heads + config_.num_key_value_heads;
  const BatchSequence& s = batch.sequences[token_sequence_[t]];
  const int32_t* blocks = batch.block_ids.data() + s.block_offset;
  const int i = t - s.token_offset;
  float* row = qkv_.data() + static_cast<size_t>(t) * stride;
  const float* cos = rope_cos_.data() + static_cast<size_t>(t) * half;
  const float* sin = rope_sin_.data() + static_cast<size_t>(t) * half;
  // q heads and k heads are adjacent in the fused row.
  for (int h = 0; h < rotated_heads; ++h) {
    float* v = row + h * hd;
    for (int f = 0; f < half; ++f) {
      const float x1 = v[f];
      const float x2 = v[f + half];
      v[f] = x1 * cos[f] - x2 * sin[f];
      v[f + half] = x2 * cos[f] + x1 * sin[f];
    }
  }
  const int position = s.start_position + i;
  const int block = blocks[position / layout_.block_size];
  const int slot = position % layout_.block_size;
  // Keys transposed within their block ([kv head][dim][slot]): Attention's scores for a
  // block are then products of slot vectors, with no horizontal sums.
  float* keys = KeyBlock(layer, block) + slot;
  const float* k = row + q_width_;
  for (int d = 0; d < kv_width_; ++d) keys[static_cast<size_t>(d) * layout_.block_size] = k[d];
  std::copy_n(row + q_width_ + kv_width_, kv_width_, ValueSlot(layer, block, slot));
}

void CpuBackend::ApplyRopeAndStore(const StepBatch& batch, int layer) {
  // By sequence: a sequence's tokens go to the same KV blocks, whose keys are stored transposed
  // (a token's key is one float per cache line), so tokens of one block on two threads would
  // write the same lines.
  ForEachRow(static_cast<int>(batch.sequences.size()), 1, [&](int /*worker*/, int i) {
    const BatchSequence& s = batch.sequences[i];
    for (int t = s.token_offset; t < s.token_offset + s.num_tokens; ++t) {
      RopeAndStoreToken(batch, layer, t);
    }
  });
}

GECD_VECTOR_CLONES void CpuBackend::AttendToken(const StepBatch& batch, int layer, int t,
                                                float* scores) {
  const int hd = config_.head_dim;
  const int group = config_.num_attention_heads / config_.num_key_value_heads;
  const int stride = q_width_ + 2 * kv_width_;
  const int bs = layout_.block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const BatchSequence& s = batch.sequences[token_sequence_[t]];
  const int32_t* blocks = batch.block_ids.data() + s.block_offset;
  const int i = t - s.token_offset;
  const int context = s.start_position + i + 1;  // causal: positions 0..start+i
  // The query heads sharing a KV head are adjacent, so each key and value block is read
  // while it is in L1 for the whole group. scores holds [group][context].
  for (int g = 0; g < config_.num_key_value_heads; ++g) {
    const float* q = qkv_.data() + static_cast<size_t>(t) * stride + g * group * hd;
    ScoreJob jobs[4];
    int pending = 0;
    for (int j = 0, b = 0; j < context; j += bs, ++b) {
      const float* keys = KeyBlock(layer, blocks[b]) + static_cast<size_t>(g) * hd * bs;
      for (int h = 0; h < group; ++h) {
        jobs[pending++] = {.q = q + h * hd,
                           .keys = keys,
                           .sc = scores + h * context + j,
                           .n = std::min(bs, context - j)};
        if (pending == 4) {
          RunScoreJobs(jobs, pending, hd, bs, scale);
          pending = 0;
        }
      }
    }
    RunScoreJobs(jobs, pending, hd, bs, scale);
    const ValueRows rows{.base = ValueSlot(layer, 0, 0) + g * hd,
                         .blocks = blocks,
                         .block_stride = static_cast<size_t>(bs) * kv_width_,
                         .bs = bs,
                         .row_stride = kv_width_};
    float* out = attn_.data() + static_cast<size_t>(t) * q_width_ + g * group * hd;
    for (int h = 0; h < group; ++h) {
      float* __restrict sc = scores + h * context;
      const float max_score = MaxOf(sc, context);
      for (int j = 0; j < context; ++j) sc[j] = ExpApprox(sc[j] - max_score);
      float sum = 0.0f;
      for (int j = 0; j < context; ++j) sum += sc[j];
      const float inv_sum = 1.0f / sum;
      for (int j = 0; j < context; ++j) sc[j] *= inv_sum;
      WeightedValues(sc, context, hd, rows, out + h * hd);
    }
  }
}

void CpuBackend::Attention(const StepBatch& batch, int layer) {
  // One token at a time: a decode's context is ~50-200 positions, a few µs a layer.
  ForEachRow(batch.num_tokens(), 1, [&](int worker, int t) {
    AttendToken(batch, layer, t, scores_.data() + static_cast<size_t>(worker) * scores_per_worker_);
  });
}

void CpuBackend::SizeRowWorkspaces(int workers) {
  if (workers <= row_workers_) return;
  row_workers_ = workers;
  scores_.resize(static_cast<size_t>(workers) * scores_per_worker_);
  // gate_up_, act_ and logits_ give each worker a row when a step goes row by row.
  const auto at_least = [workers](std::vector<float>& v, size_t row) {
    v.resize(std::max(v.size(), static_cast<size_t>(workers) * row));
  };
  at_least(gate_up_, static_cast<size_t>(2) * config_.intermediate_size);
  at_least(act_, static_cast<size_t>(config_.intermediate_size));
  at_least(logits_, static_cast<size_t>(config_.vocab_size));
}

void CpuBackend::NormRows(const std::vector<float>& weight, int tokens) {
  const int hidden = config_.hidden_size;
  ForEachRow(tokens, kRowChunk, [&](int /*worker*/, int t) {
    const size_t at = static_cast<size_t>(t) * hidden;
    RmsNorm(x_.data() + at, weight.data(), hidden, config_.rms_norm_eps, h_.data() + at);
  });
}

void CpuBackend::Mlp(const Layer& layer, int tokens) {
  const int inter = config_.intermediate_size;
#ifdef GECD_HAVE_ONEDNN
  const cpu_matmul::Matmul* gate_up = layer.gate_up.onednn();
  const cpu_matmul::Matmul* down = layer.down.onednn();
  if (gate_up != nullptr && down != nullptr) {
    // The arithmetic of the loops below, row by row: a row's gate/up values, its SiLU and its
    // quantization for down stay in L1 instead of going out to [tokens, 2 intermediate] and
    // [tokens, intermediate] buffers and back.
    const int hidden = config_.hidden_size;
    cpu_matmul::MatmulScratch* scratch = &scratch_.onednn;
    GECD_PROFILE_MARK(kGateUp);
    gate_up->SetInputRows(h_.data(), tokens, scratch);
    gate_up->Multiply(tokens, scratch);
    GECD_PROFILE_MARK(kSilu);
    // Each worker's row of gate_up_ and act_.
    ForEachRow(tokens, 1, [&](int worker, int t) {
      float* gate = gate_up_.data() + static_cast<size_t>(worker) * 2 * inter;
      float* act = act_.data() + static_cast<size_t>(worker) * inter;
      gate_up->OutputRow(t, *scratch, gate, /*accumulate=*/false);
      SiluTimes(gate, gate + inter, inter, act);
      down->SetInputRow(t, act, scratch);
    });
    GECD_PROFILE_MARK(kDown);
    down->Multiply(tokens, scratch);
    ForEachRow(tokens, kRowChunk, [&](int /*worker*/, int t) {
      down->OutputRow(t, *scratch, x_.data() + static_cast<size_t>(t) * hidden,
                      /*accumulate=*/true);
    });
    return;
  }
#endif
  GECD_PROFILE_MARK(kGateUp);
  layer.gate_up.Apply(h_.data(), tokens, gate_up_.data(), /*accumulate=*/false, &scratch_);
  GECD_PROFILE_MARK(kSilu);
  ForEachRow(tokens, 1, [&](int /*worker*/, int t) {
    const float* gate = gate_up_.data() + static_cast<size_t>(t) * 2 * inter;
    SiluTimes(gate, gate + inter, inter, act_.data() + static_cast<size_t>(t) * inter);
  });
  GECD_PROFILE_MARK(kDown);
  layer.down.Apply(act_.data(), tokens, x_.data(), /*accumulate=*/true, &scratch_);
}

absl::Status CpuBackend::Forward(const StepBatch& batch, StepResult* result) {
  GECD_PROFILE_BEGIN(kValidate);
  RETURN_IF_ERROR(Validate(batch));
  result->next_tokens.clear();
  result->logits.clear();
  const int tokens = batch.num_tokens();
  if (tokens == 0) {
    previous_next_tokens_.clear();
    GECD_PROFILE_END();
    return absl::OkStatus();
  }
  const int hidden = config_.hidden_size;
  const float eps = config_.rms_norm_eps;

  GECD_PROFILE_MARK(kEmbed);
#ifdef GECD_HAVE_ONEDNN
  // OpenMP's thread count is a per-thread setting: SelectIsa's thread set it, but steps may run
  // on another (the engine's compute thread), whose default is every core the process may be
  // scheduled on: far more than a pod's CPU quota.
  cpu_matmul::SetMatmulThreads(threads_);
#endif
  SizeRowWorkspaces(RowWorkers());
  for (int t = 0; t < tokens; ++t) {
    std::copy_n(embed_.data() + static_cast<size_t>(tokens_[t]) * hidden, hidden,
                x_.data() + static_cast<size_t>(t) * hidden);
  }
  GECD_PROFILE_MARK(kRopeTables);
  ComputeRope(batch);
  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
    const Layer& layer = layers_[l];
    GECD_PROFILE_MARK(kInputNorm);
    NormRows(layer.input_norm, tokens);
    GECD_PROFILE_MARK(kQkv);
    layer.qkv.Apply(h_.data(), tokens, qkv_.data(), /*accumulate=*/false, &scratch_);
    GECD_PROFILE_MARK(kRopeStore);
    ApplyRopeAndStore(batch, l);
    GECD_PROFILE_MARK(kAttention);
    Attention(batch, l);
    GECD_PROFILE_MARK(kO);
    layer.o.Apply(attn_.data(), tokens, x_.data(), /*accumulate=*/true, &scratch_);

    GECD_PROFILE_MARK(kPostNorm);
    NormRows(layer.post_attention_norm, tokens);
    Mlp(layer, tokens);
  }

  // Only the rows that sample need the final norm and the (large) lm_head GEMM. A verify entry
  // samples its last 1 + num_drafts rows, the copy cursor advancing over each draft as it
  // would have had the drafts been generated one by one.
  GECD_PROFILE_MARK(kSample);
  sample_rows_.clear();
  sample_candidates_.clear();
  sample_bias_.clear();
  for (const BatchSequence& s : batch.sequences) {
    if (!s.sample) continue;
    const int first = s.token_offset + s.num_tokens - 1 - s.num_drafts;
    const std::span<const int32_t> text(batch.copy_tokens.data() + s.copy.text_offset,
                                        s.copy.text_length);
    CopyCursor cursor = s.copy.cursor;
    for (int j = 0; j <= s.num_drafts; ++j) {
      int32_t candidate = -1;
      if (s.copy.bias != 0) {
        if (j > 0 || s.copy.advance) cursor = AdvanceCopy(text, cursor, tokens_[first + j]);
        candidate = CopyCandidate(text, cursor, s.copy.end_token);
      }
      sample_rows_.push_back(first + j);
      sample_candidates_.push_back(candidate);
      sample_bias_.push_back(s.copy.bias);
    }
  }
  const int vocab = config_.vocab_size;
  const int rows = static_cast<int>(sample_rows_.size());
  // In groups of max_batch_size rows, the size of the logits buffer.
  for (int r0 = 0; r0 < rows; r0 += max_batch_size_) {
    const int n = std::min(max_batch_size_, rows - r0);
    GECD_PROFILE_MARK(kFinalNorm);
    for (int r = 0; r < n; ++r) {
      RmsNorm(x_.data() + static_cast<size_t>(sample_rows_[r0 + r]) * hidden, final_norm_.data(),
              hidden, eps, last_.data() + static_cast<size_t>(r) * hidden);
    }
    GECD_PROFILE_MARK(kLmHead);
#ifdef GECD_HAVE_ONEDNN
    if (const cpu_matmul::Matmul* lm_head = lm_head_.onednn();
        lm_head != nullptr && !batch.return_logits) {
      // Row by row, as Mlp: a row's logits go from the sums to the argmax while in L1 (32 KB
      // for 8,000 tokens), not out to [rows, vocab] and back (4 MB at 128 rows).
      cpu_matmul::MatmulScratch* scratch = &scratch_.onednn;
      lm_head->SetInputRows(last_.data(), n, scratch);
      lm_head->Multiply(n, scratch);
      GECD_PROFILE_MARK(kSample);
      result->next_tokens.resize(static_cast<size_t>(r0 + n));
      // Each worker's row of logits_.
      ForEachRow(n, 1, [&](int worker, int r) {
        float* logits = logits_.data() + static_cast<size_t>(worker) * vocab;
        lm_head->OutputRow(r, *scratch, logits, /*accumulate=*/false);
        result->next_tokens[r0 + r] =
            BiasedArgmax(std::span<const float>(logits, vocab), sample_candidates_[r0 + r],
                         sample_bias_[r0 + r]);
      });
      continue;
    }
#endif
    lm_head_.Apply(last_.data(), n, logits_.data(), /*accumulate=*/false, &scratch_);
    GECD_PROFILE_MARK(kSample);
    for (int r = 0; r < n; ++r) {
      const std::span<const float> row(logits_.data() + static_cast<size_t>(r) * vocab, vocab);
      result->next_tokens.push_back(
          BiasedArgmax(row, sample_candidates_[r0 + r], sample_bias_[r0 + r]));
    }
    GECD_PROFILE_MARK(kResult);
    if (batch.return_logits) {
      result->logits.insert(result->logits.end(), logits_.begin(),
                            logits_.begin() + static_cast<size_t>(n) * vocab);
    }
  }
  GECD_PROFILE_MARK(kResult);
  previous_next_tokens_ = result->next_tokens;
  GECD_PROFILE_END();
  return absl::OkStatus();
}

}  // namespace gecd::engine

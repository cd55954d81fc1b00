#include "cpu_matmul/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/assert.h"
#include "common/status_macros.h"
#include "cpu_matmul/cpu_isa.h"

namespace gecd::cpu_matmul {
namespace {

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
using Type = dnnl::memory::data_type;

// One CPU engine per process: oneDNN's primitive cache is keyed by it.
const dnnl::engine& CpuEngine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// The kernel's operand and sum types, and the operand's size in bytes.
Type OperandType(Precision p) { return p == Precision::kInt8 ? Type::s8 : Type::bf16; }
Type SumType(Precision p) { return p == Precision::kInt8 ? Type::s32 : Type::f32; }
size_t OperandBytes(Precision p) { return p == Precision::kInt8 ? 1 : 2; }

// One activation's int8 code: v * inv rounded half away from zero, clamped to ±127.
inline int8_t QuantizeOne(float v, float inv) {
  const float q = v * inv;  // |q| <= 127 up to rounding; the clamp keeps it in range
  float r = q + (q >= 0.0f ? 0.5f : -0.5f);
  r = r < -127.0f ? -127.0f : r;
  r = r > 127.0f ? 127.0f : r;
  return static_cast<int8_t>(static_cast<int>(r));
}

#if defined(__x86_64__)
// QuantizeOne over n values, 16 at a time. GCC's own vectorization of the loop (ternaries,
// float to int8) came out as 256-bit blends, packs and spills: ~5% of an int8 step. The
// same operations in the same order, so the same codes: q + copysign(0.5, q) differs from
// QuantizeOne's q + (q >= 0 ? 0.5 : -0.5) only at q = -0, where both truncate to 0.
__attribute__((target("avx512f"))) void QuantizeCodesAvx512(const float* v, int n, float inv,
                                                            int8_t* codes) {
  // The zero-masked forms of max, min and the conversions: GCC 12 warns (wrongly) that the
  // plain ones' undefined pass-through operand may be used uninitialized.
  constexpr __mmask16 kAll = 0xffff;
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i half = _mm512_castps_si512(_mm512_set1_ps(0.5f));
  const __m512 low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 q = _mm512_mul_ps(_mm512_loadu_ps(v + i), scale);
    const __m512 signed_half =
        _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(q), sign), half));
    const __m512 r = _mm512_maskz_min_ps(
        kAll, _mm512_maskz_max_ps(kAll, _mm512_add_ps(q, signed_half), low), high);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     _mm512_maskz_cvtepi32_epi8(kAll, _mm512_maskz_cvttps_epi32(kAll, r)));
  }
  for (; i < n; ++i) codes[i] = QuantizeOne(v[i], inv);
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#endif

// Symmetric int8 of one row: scale = max|v| / 127, codes round(v / scale) half away from zero.
// A zero row gets scale 1 (codes 0); a row with a non-finite value a NaN scale, so the outputs
// it touches are not finite either. max|v| is the largest of the values' bit patterns with the
// sign cleared (their order is the floats' order, and inf and NaN patterns lie above every
// finite one), which the compiler vectorizes without fast-math.
__attribute__((target_clones("avx512f", "avx2", "default"))) float QuantizeRow(const float* v,
                                                                               int n,
                                                                               int8_t* codes) {
  uint32_t amax_bits = 0;
  for (int i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof(bits));
    amax_bits = std::max(amax_bits, bits & 0x7fffffffu);
  }
  if (amax_bits >= 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof(amax));
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  const float inv = 1.0f / scale;
#if defined(__x86_64__)
  if (HasAvx512()) {
    QuantizeCodesAvx512(v, n, inv, codes);
    return scale;
  }
#endif
  for (int i = 0; i < n; ++i) codes[i] = QuantizeOne(v[i], inv);
  return scale;
}

// bf16 of n values: round to nearest, ties to even, NaN stays a (quiet) NaN, infinities stay
// infinite; bit for bit common/numerics.h's FloatToBf16, in a form the compiler vectorizes.
__attribute__((target_clones("avx512f", "avx2", "default"))) void ToBf16(const float* v, size_t n,
                                                                         uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, &v[i], sizeof(x));
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t nan = (x >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

// y[o] (+)= acc[o] * s * sw[o] (+ bias[o]) over one output row of int32 sums; the four cases
// apart so each loop vectorizes.
__attribute__((target_clones("avx512f", "avx2", "default"))) void Int8Epilogue(
    const int32_t* acc, float s, const float* sw, const float* bias, int n, bool accumulate,
    float* y) {
  if (bias == nullptr && !accumulate) {
    for (int o = 0; o < n; ++o) y[o] = static_cast<float>(acc[o]) * s * sw[o];
  } else if (bias == nullptr) {
    for (int o = 0; o < n; ++o) y[o] += static_cast<float>(acc[o]) * s * sw[o];
  } else if (!accumulate) {
    for (int o = 0; o < n; ++o) y[o] = static_cast<float>(acc[o]) * s * sw[o] + bias[o];
  } else {
    for (int o = 0; o < n; ++o) y[o] += static_cast<float>(acc[o]) * s * sw[o] + bias[o];
  }
}

// y (+)= acc (+ bias) over one output row of f32 sums.
__attribute__((target_clones("avx512f", "avx2", "default"))) void Bf16Epilogue(
    const float* acc, const float* bias, int n, bool accumulate, float* y) {
  if (bias == nullptr && !accumulate) {
    std::memcpy(y, acc, static_cast<size_t>(n) * sizeof(float));
  } else if (bias == nullptr) {
    for (int o = 0; o < n; ++o) y[o] += acc[o];
  } else if (!accumulate) {
    for (int o = 0; o < n; ++o) y[o] = acc[o] + bias[o];
  } else {
    for (int o = 0; o < n; ++o) y[o] += acc[o] + bias[o];
  }
}

// The first row of a row-major [rows, cols] matrix holding a value that is not finite, or -1.
int FirstNonFiniteRow(std::span<const float> m, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* row = m.data() + static_cast<size_t>(r) * cols;
    bool finite = true;
    for (int c = 0; c < cols; ++c) finite &= std::isfinite(row[c]);
    if (!finite) return r;
  }
  return -1;
}

}  // namespace

struct Matmul::Kernels {
  dnnl::stream stream;
  dnnl::memory::desc weights_desc;
  dnnl::memory weights;                // the operands in the kernels' layout
  std::vector<dnnl::matmul> by_class;  // [class index], see ClassIndex
  std::vector<int> class_rows;         // [class index] its row count
};

namespace {

// The index of RowClass(rows) in the ascending list of classes.
int ClassIndex(int rows) {
  const int c = RowClass(rows);
  if (c <= 128) return c / 8 - 1;
  if (c <= 512) return 16 + (c - 128) / 32 - 1;
  return 16 + 12 + (c - 512) / 128 - 1;
}

}  // namespace

Matmul::~Matmul() = default;

absl::StatusOr<std::unique_ptr<Matmul>> Matmul::Create(Precision precision, const std::string& name,
                                                       std::span<const float> weight,
                                                       std::span<const float> bias, int out, int in,
                                                       int max_rows) {
  if (out <= 0 || in <= 0 || max_rows <= 0 ||
      weight.size() != static_cast<size_t>(out) * static_cast<size_t>(in) ||
      (!bias.empty() && bias.size() != static_cast<size_t>(out))) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": a ", PrecisionName(precision), " matmul of [", out, ", ", in, "] for ", max_rows,
        " rows cannot take ", weight.size(), " weights and ", bias.size(), " biases"));
  }
  if (const int row = FirstNonFiniteRow(weight, out, in); row >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": weight row ", row, " holds a value that is not finite"));
  }
  if (precision == Precision::kInt8) {
    ASSIGN_OR_RETURN(const CpuIsa isa, SelectCpuIsa("auto"));
    if (!isa.int8_dot) {
      return absl::FailedPreconditionError(absl::StrCat(
          name,
          ": an int8 matmul needs VNNI (AVX512-VNNI or AVX-VNNI); oneDNN's kernels here run "
          "at ",
          isa.name, ", whose 16-bit steps saturate"));
    }
  }
  auto m = std::unique_ptr<Matmul>(new Matmul());
  m->precision_ = precision;
  m->out_ = out;
  m->in_ = in;
  m->max_rows_ = max_rows;
  m->bias_.assign(bias.begin(), bias.end());
  std::vector<std::byte> plain(weight.size() * OperandBytes(precision));
  if (precision == Precision::kInt8) {
    m->weight_scale_.resize(out);
    auto* codes = reinterpret_cast<int8_t*>(plain.data());
    for (int o = 0; o < out; ++o) {
      const size_t at = static_cast<size_t>(o) * in;
      m->weight_scale_[o] = QuantizeRow(weight.data() + at, in, codes + at);
    }
  } else {
    ToBf16(weight.data(), weight.size(), reinterpret_cast<uint16_t*>(plain.data()));
  }
  RETURN_IF_ERROR(m->BuildKernels(name, plain.data()));
  return m;
}

absl::Status Matmul::BuildKernels(const std::string& name, const void* plain) try {
  const dnnl::engine& engine = CpuEngine();
  const Type operand = OperandType(precision_), sum = SumType(precision_);
  auto k = std::make_unique<Kernels>();
  k->stream = dnnl::stream(engine);
  // W as the [in, out] right-hand operand: our [out, in] rows are its columns (tag ba).
  const dnnl::memory::desc plain_desc({in_, out_}, operand, Tag::ba);
  const dnnl::memory::desc any({in_, out_}, operand, Tag::any);
  for (int rows = 8; rows <= RowClass(max_rows_); rows = RowClass(rows + 1)) {
    const dnnl::memory::desc src({rows, in_}, operand, Tag::ab);
    const dnnl::memory::desc dst({rows, out_}, sum, Tag::ab);
    // The first class picks the weights' layout; the others are compiled for that layout so
    // that one reordered copy serves them all.
    const bool first = k->by_class.empty();
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, first ? any : k->weights_desc, dst),
                                    engine);
    if (first) {
      k->weights_desc = pd.weights_desc();
      kernel_ = pd.impl_info_str();
    }
    k->by_class.emplace_back(pd);
    k->class_rows.push_back(rows);
  }
  dnnl::memory plain_weights(plain_desc, engine, const_cast<void*>(plain));
  k->weights = dnnl::memory(k->weights_desc, engine);
  dnnl::reorder(plain_weights, k->weights).execute(k->stream, plain_weights, k->weights);
  k->stream.wait();
  kernels_ = std::move(k);
  return absl::OkStatus();
} catch (const dnnl::error& e) {
  return absl::InternalError(absl::StrCat(name, ": oneDNN cannot build a ",
                                          PrecisionName(precision_), " matmul of [", out_, ", ",
                                          in_, "]: ", e.what()));
}

void Matmul::Apply(const float* x, int rows, float* y, bool accumulate,
                   MatmulScratch* scratch) const {
  if (rows <= 0) return;
  SetInputRows(x, rows, scratch);
  Multiply(rows, scratch);
  for (int t = 0; t < rows; ++t) {
    OutputRow(t, *scratch, y + static_cast<size_t>(t) * out_, accumulate);
  }
}

void Matmul::SetInputRows(const float* x, int rows, MatmulScratch* scratch) const {
  for (int t = 0; t < rows; ++t) SetInputRow(t, x + static_cast<size_t>(t) * in_, scratch);
}

void Matmul::SetInputRow(int t, const float* x_row, MatmulScratch* scratch) const {
  const size_t at = static_cast<size_t>(t) * in_;
  if (precision_ == Precision::kInt8) {
    scratch->x_scale[t] =
        QuantizeRow(x_row, in_, reinterpret_cast<int8_t*>(scratch->src.data()) + at);
  } else {
    ToBf16(x_row, in_, reinterpret_cast<uint16_t*>(scratch->src.data()) + at);
  }
}

void Matmul::Multiply(int rows, MatmulScratch* scratch) const {
  GECD_ASSERT(rows > 0 && rows <= max_rows_, "Matmul::Multiply: rows outside 1..max_rows");
  const int index = ClassIndex(rows);
  const int padded = kernels_->class_rows[index];
  const size_t width = OperandBytes(precision_);
  std::byte* src = scratch->src.data();
  // The padding rows' products are computed and ignored; zero operands keep them cheap to
  // reason about (and deterministic for tools like valgrind).
  std::fill(src + static_cast<size_t>(rows) * in_ * width,
            src + static_cast<size_t>(padded) * in_ * width, std::byte{0});
  const dnnl::engine& engine = CpuEngine();
  dnnl::memory src_memory({{padded, in_}, OperandType(precision_), Tag::ab}, engine, src);
  dnnl::memory dst_memory({{padded, out_}, SumType(precision_), Tag::ab}, engine,
                          scratch->dst.data());
  kernels_->by_class[index].execute(kernels_->stream, {{DNNL_ARG_SRC, src_memory},
                                                       {DNNL_ARG_WEIGHTS, kernels_->weights},
                                                       {DNNL_ARG_DST, dst_memory}});
  kernels_->stream.wait();
}

void Matmul::OutputRow(int t, const MatmulScratch& scratch, float* y_row, bool accumulate) const {
  const size_t at = static_cast<size_t>(t) * out_;
  const float* b = bias_.empty() ? nullptr : bias_.data();
  if (precision_ == Precision::kInt8) {
    Int8Epilogue(reinterpret_cast<const int32_t*>(scratch.dst.data()) + at, scratch.x_scale[t],
                 weight_scale_.data(), b, out_, accumulate, y_row);
  } else {
    Bf16Epilogue(reinterpret_cast<const float*>(scratch.dst.data()) + at, b, out_, accumulate,
                 y_row);
  }
}

}  // namespace gecd::cpu_matmul

#include "cpu_matmul/int8_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/assert.h"

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

// Symmetric int8 of one row: scale = max|v| / 127, codes round(v / scale) half away from zero.
// A zero row gets scale 1 (codes 0); a row with a non-finite value a NaN scale, so the outputs
// it touches are not finite either. Written so the compiler vectorizes it without fast-math:
// max|v| as the largest of the values' bit patterns with the sign cleared (their order is the
// floats' order, and inf and NaN patterns lie above every finite one), the rounding and clamp
// element-wise. It and Epilogue take ~23% of an int8 step when scalar (perf, gecd eval).
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
  for (int i = 0; i < n; ++i) {
    const float q = v[i] * inv;  // |q| <= 127 up to rounding; the clamp keeps it in range
    float r = q + (q >= 0.0f ? 0.5f : -0.5f);
    r = r < -127.0f ? -127.0f : r;
    r = r > 127.0f ? 127.0f : r;
    codes[i] = static_cast<int8_t>(static_cast<int>(r));
  }
  return scale;
}

// y[o] (+)= acc[o] * s * sw[o] (+ bias[o]) over one output row; the four cases apart so each
// loop vectorizes.
__attribute__((target_clones("avx512f", "avx2", "default"))) void Epilogue(const int32_t* acc,
                                                                           float s, const float* sw,
                                                                           const float* bias, int n,
                                                                           bool accumulate,
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

}  // namespace

struct Int8Matmul::Kernels {
  dnnl::stream stream;
  dnnl::memory::desc weights_desc;
  dnnl::memory weights;                // int8 codes in the kernels' layout
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

Int8Matmul::~Int8Matmul() = default;

absl::StatusOr<std::unique_ptr<Int8Matmul>> Int8Matmul::Create(const std::string& name,
                                                               std::span<const float> weight,
                                                               std::span<const float> bias, int out,
                                                               int in, int max_rows) {
  if (out <= 0 || in <= 0 || max_rows <= 0 ||
      weight.size() != static_cast<size_t>(out) * static_cast<size_t>(in) ||
      (!bias.empty() && bias.size() != static_cast<size_t>(out))) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": an int8 matmul of [", out, ", ", in, "] for ", max_rows,
                     " rows cannot take ", weight.size(), " weights and ", bias.size(), " biases"));
  }
  auto m = std::unique_ptr<Int8Matmul>(new Int8Matmul());
  m->out_ = out;
  m->in_ = in;
  m->max_rows_ = max_rows;
  m->bias_.assign(bias.begin(), bias.end());
  m->weight_scale_.resize(out);
  std::vector<int8_t> codes(static_cast<size_t>(out) * in);
  for (int o = 0; o < out; ++o) {
    const float* row = weight.data() + static_cast<size_t>(o) * in;
    m->weight_scale_[o] = QuantizeRow(row, in, codes.data() + static_cast<size_t>(o) * in);
    if (!std::isfinite(m->weight_scale_[o])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": weight row ", o, " holds a value that is not finite"));
    }
  }
  try {
    const dnnl::engine& engine = CpuEngine();
    auto k = std::make_unique<Kernels>();
    k->stream = dnnl::stream(engine);
    // W as the [in, out] right-hand operand: our [out, in] rows are its columns (tag ba).
    const dnnl::memory::desc plain({in, out}, Type::s8, Tag::ba);
    const dnnl::memory::desc any({in, out}, Type::s8, Tag::any);
    for (int rows = 8; rows <= RowClass(max_rows); rows = RowClass(rows + 1)) {
      const dnnl::memory::desc src({rows, in}, Type::s8, Tag::ab);
      const dnnl::memory::desc dst({rows, out}, Type::s32, Tag::ab);
      // The first class picks the weights' layout; the others are compiled for that layout so
      // that one reordered copy serves them all.
      const bool first = k->by_class.empty();
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, first ? any : k->weights_desc, dst),
                                      engine);
      if (first) {
        k->weights_desc = pd.weights_desc();
        m->kernel_ = pd.impl_info_str();
      }
      k->by_class.emplace_back(pd);
      k->class_rows.push_back(rows);
    }
    dnnl::memory plain_weights(plain, engine, codes.data());
    k->weights = dnnl::memory(k->weights_desc, engine);
    dnnl::reorder(plain_weights, k->weights).execute(k->stream, plain_weights, k->weights);
    k->stream.wait();
    m->kernels_ = std::move(k);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(name, ": oneDNN cannot build an int8 matmul of [", out,
                                            ", ", in, "]: ", e.what()));
  }
  return m;
}

void Int8Matmul::Apply(const float* x, int rows, float* y, bool accumulate,
                       Int8Scratch* scratch) const {
  if (rows <= 0) return;
  GECD_ASSERT(rows <= max_rows_, "Int8Matmul::Apply: more rows than Create's max_rows");
  const int index = ClassIndex(rows);
  const int padded = kernels_->class_rows[index];
  int8_t* x_q = scratch->x_q.data();
  float* sx = scratch->x_scale.data();
  for (int t = 0; t < rows; ++t) {
    sx[t] = QuantizeRow(x + static_cast<size_t>(t) * in_, in_, x_q + static_cast<size_t>(t) * in_);
  }
  // The padding rows' products are computed and ignored; zero codes keep them cheap to reason
  // about (and deterministic for tools like valgrind).
  std::fill(x_q + static_cast<size_t>(rows) * in_, x_q + static_cast<size_t>(padded) * in_, 0);
  const dnnl::engine& engine = CpuEngine();
  dnnl::memory src({{padded, in_}, Type::s8, Tag::ab}, engine, x_q);
  dnnl::memory dst({{padded, out_}, Type::s32, Tag::ab}, engine, scratch->acc.data());
  kernels_->by_class[index].execute(
      kernels_->stream,
      {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, kernels_->weights}, {DNNL_ARG_DST, dst}});
  kernels_->stream.wait();
  const float* b = bias_.empty() ? nullptr : bias_.data();
  for (int t = 0; t < rows; ++t) {
    Epilogue(scratch->acc.data() + static_cast<size_t>(t) * out_, sx[t], weight_scale_.data(), b,
             out_, accumulate, y + static_cast<size_t>(t) * out_);
  }
}

}  // namespace gecd::cpu_matmul

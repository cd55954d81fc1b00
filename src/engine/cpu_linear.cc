#include "engine/cpu_linear.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/numerics.h"

namespace gecd::engine {

void LinearScratch::Reserve(int rows, int max_in, int max_out) {
  const size_t r = static_cast<size_t>(rows);
  if (x_q.size() < r * max_in) x_q.resize(r * max_in);
  if (x_scale.size() < r) x_scale.resize(r);
  if (acc.size() < r * max_out) acc.resize(r * max_out);
  onednn.Reserve(rows, max_in, max_out);
}

absl::StatusOr<CpuLinear> CpuLinear::Fuse(std::span<const model::LinearWeight> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("CpuLinear::Fuse: no parts");
  CpuLinear linear;
  const bool fp8 = parts[0].is_fp8();
  const bool any_bias = std::any_of(
      parts.begin(), parts.end(), [](const model::LinearWeight& p) { return p.bias.has_value(); });
  for (const model::LinearWeight& part : parts) {
    const auto& shape = part.weight.shape;
    if (shape.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(part.weight.name, ": a Linear weight must be 2-D"));
    }
    const int out = static_cast<int>(shape[0]);
    const int in = static_cast<int>(shape[1]);
    if (linear.in_ != 0 && in != linear.in_) {
      return absl::InvalidArgumentError(absl::StrCat(
          part.weight.name, ": input size ", in, " differs from the fused layer's ", linear.in_));
    }
    if (part.is_fp8() != fp8) {
      return absl::UnimplementedError(
          absl::StrCat(part.weight.name,
                       ": layers fused into one GEMM must be all FP8 or all unquantized (check the "
                       "quantization ignore list)"));
    }
    linear.in_ = in;
    std::vector<float> w = model::ToFloat(part.weight);
    linear.weight_.insert(linear.weight_.end(), w.begin(), w.end());
    if (fp8) {
      std::vector<float> s = model::ToFloat(*part.scale);
      if (static_cast<int>(s.size()) != out) {
        return absl::InvalidArgumentError(absl::StrCat(
            part.scale->name, ": expected ", out, " per-output-channel scales, got ", s.size()));
      }
      for (size_t o = 0; o < s.size(); ++o) {
        if (!std::isfinite(s[o]) || s[o] <= 0.0f) {
          return absl::InvalidArgumentError(
              absl::StrCat(part.scale->name, ": scale ", o, " is ", s[o],
                           "; an FP8 weight's scales must be finite and positive"));
        }
      }
      linear.weight_scale_.insert(linear.weight_scale_.end(), s.begin(), s.end());
    }
    if (any_bias) {
      std::vector<float> b = part.bias ? model::ToFloat(*part.bias) : std::vector<float>(out, 0.0f);
      if (static_cast<int>(b.size()) != out) {
        return absl::InvalidArgumentError(
            absl::StrCat(part.bias->name, ": expected ", out, " biases, got ", b.size()));
      }
      linear.bias_.insert(linear.bias_.end(), b.begin(), b.end());
    }
    linear.out_ += out;
  }
  return linear;
}

CpuLinear CpuLinear::Dense(std::vector<float> weight, int out_features, int in_features) {
  CpuLinear linear;
  linear.out_ = out_features;
  linear.in_ = in_features;
  linear.weight_ = std::move(weight);
  return linear;
}

std::string CpuLinear::onednn_kernel() const {
#ifdef GECD_HAVE_ONEDNN
  if (onednn_ != nullptr) return onednn_->kernel();
#endif
  return "";
}

absl::Status CpuLinear::ToOneDnn(cpu_matmul::Precision precision, const std::string& name,
                                 int max_rows) {
#ifdef GECD_HAVE_ONEDNN
  if (is_fp8()) {
    if (precision == cpu_matmul::Precision::kBf16) return absl::OkStatus();
    for (int o = 0; o < out_; ++o) {
      float* row = weight_.data() + static_cast<size_t>(o) * in_;
      for (int i = 0; i < in_; ++i) row[i] *= weight_scale_[o];
    }
  }
  absl::StatusOr<std::unique_ptr<cpu_matmul::Matmul>> m =
      cpu_matmul::Matmul::Create(precision, name, weight_, bias_, out_, in_, max_rows);
  if (!m.ok()) return m.status();
  onednn_ = *std::move(m);
  weight_ = {};
  weight_scale_ = {};
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      absl::StrCat(cpu_matmul::PrecisionName(precision),
                   " matmuls, but this gecd was built without oneDNN (-DGECD_ONEDNN=OFF); ", name,
                   " stays f32"));
#endif
}

void CpuLinear::Apply(const float* x, int rows, float* y, bool accumulate,
                      LinearScratch* scratch) const {
  if (rows <= 0) return;
#ifdef GECD_HAVE_ONEDNN
  if (onednn_ != nullptr) {
    onednn_->Apply(x, rows, y, accumulate, &scratch->onednn);
    return;
  }
#endif
  if (!is_fp8()) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_, in_, 1.0f, x, in_,
                weight_.data(), in_, accumulate ? 1.0f : 0.0f, y, out_);
    if (!bias_.empty()) {
      for (int t = 0; t < rows; ++t) {
        float* row = y + static_cast<size_t>(t) * out_;
        for (int o = 0; o < out_; ++o) row[o] += bias_[o];
      }
    }
    return;
  }
  float* x_q = scratch->x_q.data();
  float* sx = scratch->x_scale.data();
  QuantizeRowsE4m3(x, rows, in_, x_q, sx);
  float* acc = accumulate ? scratch->acc.data() : y;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_, in_, 1.0f, x_q, in_,
              weight_.data(), in_, 0.0f, acc, out_);
  const float* sw = weight_scale_.data();
  for (int t = 0; t < rows; ++t) {
    const float* a = acc + static_cast<size_t>(t) * out_;
    float* row = y + static_cast<size_t>(t) * out_;
    const float s = sx[t];
    for (int o = 0; o < out_; ++o) {
      float v = a[o] * s * sw[o];
      if (!bias_.empty()) v += bias_[o];
      row[o] = accumulate ? row[o] + v : v;
    }
  }
}

}  // namespace gecd::engine

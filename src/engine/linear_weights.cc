#include "engine/linear_weights.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/numerics.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"

namespace gecd::engine {
namespace {

// Runs fn(begin, end) over [0, n) split across the host's cores. `serial_below`: item counts
// that are not worth threads.
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

template <typename T>
void Append(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

std::vector<uint16_t> ToBf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  ParallelFor(values.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = FloatToBf16(values[i]);
  });
  return out;
}

absl::StatusOr<HostLinear> PrepareLinear(const model::Checkpoint& checkpoint,
                                         const std::vector<std::string>& modules, int64_t out,
                                         int64_t in, bool fp8, bool per_tensor) {
  HostLinear linear;
  linear.out = out;
  linear.in = in;
  linear.fp8 = fp8;
  const bool per_channel = fp8 && !per_tensor;
  std::vector<float> values;  // f32 [rows so far, in] unless per-channel codes are built
  bool any_bias = false;
  int64_t rows = 0;
  for (const std::string& m : modules) {
    ASSIGN_OR_RETURN(model::LinearWeight w, checkpoint.Linear(m));
    if (w.weight.shape.size() != 2 || w.weight.shape[1] != in) {
      return absl::InvalidArgumentError(absl::StrCat(m, ": weight is not [*, ", in, "]"));
    }
    const int64_t r = w.weight.shape[0];
    std::vector<float> s;
    if (w.is_fp8()) {
      s = model::ToFloat(*w.scale);
      if (static_cast<int64_t>(s.size()) != r) {
        return absl::InvalidArgumentError(
            absl::StrCat(m, ": weight_scale has ", s.size(), " entries for ", r, " rows"));
      }
    }
    if (per_channel && w.is_fp8()) {
      // Used as stored: the checkpoint's codes and scales.
      linear.codes.insert(linear.codes.end(), w.weight.data.begin(), w.weight.data.end());
      Append(linear.scales, s);
      ProcessStartup().Mark("weights read");
    } else {
      std::vector<float> f = model::ToFloat(w.weight);  // e4m3 decoded without its scale
      ProcessStartup().Mark("weights read");
      if (per_channel) {
        std::vector<uint8_t> c(f.size());
        s.resize(r);
        ParallelFor(
            static_cast<size_t>(r),
            [&](size_t begin, size_t end) {
              QuantizeRowsE4m3Codes(f.data() + begin * in, end - begin, in, c.data() + begin * in,
                                    s.data() + begin);
            },
            /*serial_below=*/64);
        Append(linear.codes, c);
        Append(linear.scales, s);
        linear.rows_quantized += r;
        ProcessStartup().Mark("FP8 quantization");
      } else {
        if (w.is_fp8()) {
          ParallelFor(
              static_cast<size_t>(r),
              [&](size_t begin, size_t end) {
                for (size_t o = begin; o < end; ++o) {
                  for (int64_t i = 0; i < in; ++i) f[o * in + i] *= s[o];
                }
              },
              /*serial_below=*/64);
        }
        Append(values, f);
      }
    }
    std::vector<float> bv(r, 0.0f);
    if (w.bias.has_value()) {
      any_bias = true;
      bv = model::ToFloat(*w.bias);
      if (static_cast<int64_t>(bv.size()) != r) {
        return absl::InvalidArgumentError(absl::StrCat(m, ": bias has ", bv.size(), " entries"));
      }
    }
    Append(linear.bias, bv);
    rows += r;
  }
  if (rows != out) {
    return absl::InvalidArgumentError(
        absl::StrCat(modules[0], ": expected ", out, " output rows, got ", rows));
  }
  if (!any_bias) linear.bias.clear();
  if (fp8 && per_tensor) {
    linear.codes.resize(values.size());
    linear.scales.resize(1);
    QuantizeRowsE4m3Codes(values.data(), 1, values.size(), linear.codes.data(),
                          linear.scales.data());
    linear.rows_quantized = out;
    ProcessStartup().Mark("FP8 quantization");
  } else if (!fp8) {
    linear.bf16 = ToBf16(values);
    ProcessStartup().Mark("weights read");
  }
  return linear;
}

}  // namespace gecd::engine

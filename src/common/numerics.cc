#include "common/numerics.h"

#include <array>
#include <bit>
#include <cmath>

namespace gecd {
namespace {

std::array<float, 256> MakeE4m3Table() {
  std::array<float, 256> t{};
  for (int code = 0; code < 256; ++code) {
    const int sign = code >> 7, exp = (code >> 3) & 0xF, mant = code & 0x7;
    float v;
    if (exp == 0xF && mant == 0x7) {
      v = std::nanf("");
    } else if (exp == 0) {
      v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-6 / 8
    } else {
      v = std::ldexp(1.0f + mant / 8.0f, exp - 7);
    }
    t[code] = sign ? -v : v;
  }
  return t;
}

const std::array<float, 256>& E4m3Table() {
  static const std::array<float, 256> table = MakeE4m3Table();
  return table;
}

}  // namespace

float Bf16ToFloat(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

uint16_t FloatToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float F16ToFloat(uint16_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
  const uint32_t exp = (v >> 10) & 0x1f, mant = v & 0x3ffu;
  if (exp == 0) {
    const float m = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -m : m;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to infinity
  if (x >= 0x38800000u) {                      // normal in f16 (>= 2^-14)
    x += 0xfffu + ((x >> 13) & 1u);
    x -= (127u - 15u) << 23;
    return sign | static_cast<uint16_t>(x >> 13);
  }
  // Subnormal in f16: the code is the value in units of 2^-24, rounded to even.
  return sign | static_cast<uint16_t>(std::nearbyint(std::bit_cast<float>(x) * 16777216.0f));
}

float E4m3ToFloat(uint8_t v) { return E4m3Table()[v]; }

uint8_t FloatToE4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | 0x7f;
  float a = std::fabs(f);
  if (a > kFp8E4m3Max) a = kFp8E4m3Max;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9; code 8 is the smallest normal
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  const int e = std::ilogb(a);  // -6 .. 8
  const float step = std::ldexp(1.0f, e - 3);
  const float q = std::nearbyint(a / step) * step;  // exact; may carry to 2^(e+1)
  const int qe = std::ilogb(q);
  const int mant = static_cast<int>(std::ldexp(q, 3 - qe)) - 8;  // 0..7
  return sign | static_cast<uint8_t>(((qe + 7) << 3) | mant);
}

void Bf16ToFloat(std::span<const uint16_t> in, float* out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = Bf16ToFloat(in[i]);
}

void F16ToFloat(std::span<const uint16_t> in, float* out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = F16ToFloat(in[i]);
}

void E4m3ToFloat(std::span<const uint8_t> in, float* out) {
  const auto& table = E4m3Table();
  for (size_t i = 0; i < in.size(); ++i) out[i] = table[in[i]];
}

namespace {

float RowScale(const float* row, size_t cols) {
  float amax = 0.0f;
  for (size_t i = 0; i < cols; ++i) amax = std::fmax(amax, std::fabs(row[i]));
  return amax > 0.0f ? amax / kFp8E4m3Max : kMinFp8Scale;
}

}  // namespace

void QuantizeRowsE4m3Codes(const float* x, size_t rows, size_t cols, uint8_t* codes,
                           float* scales) {
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    scales[r] = RowScale(row, cols);
    for (size_t i = 0; i < cols; ++i) codes[r * cols + i] = FloatToE4m3(row[i] / scales[r]);
  }
}

void QuantizeRowsE4m3(const float* x, size_t rows, size_t cols, float* x_q, float* scales) {
  QuantizeRowsE4m3Codes(x, rows, cols, reinterpret_cast<uint8_t*>(x_q), scales);
  // Decode in place from the back: code i sits at byte i, below float i's first byte for i > 0,
  // so walking down never overwrites a code before it is read.
  const auto& table = E4m3Table();
  for (size_t n = rows * cols; n-- > 0;) x_q[n] = table[reinterpret_cast<uint8_t*>(x_q)[n]];
}

}  // namespace gecd

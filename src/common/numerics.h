#ifndef GECD_COMMON_NUMERICS_H_
#define GECD_COMMON_NUMERICS_H_

#include <cstddef>
#include <cstdint>
#include <span>

// Scalar formats gecd reads and writes, and the FP8 quantization rules that every backend
// shares. The CPU backend is the GPU kernels' oracle, so these definitions are the contract:
//   - bf16 / f16 from f32: round to nearest, ties to even; NaN stays NaN.
//   - e4m3 (OCP "E4M3FN": bias 7, no infinities, max 448, NaN = S.1111.111) from f32: round to
//     nearest even after clamping to [-448, 448] (saturating, as cuBLASLt and
//     torch's clamp-then-cast do).
//   - a row's scale = max_i |x[r, i]| / 448, or kMinFp8Scale for an all-zero row; applied to
//     the rows of a weight [out, in] it is the per-output-channel weight scale, to the rows of
//     an activation [tokens, hidden] the per-token activation scale;
//   - x_q = e4m3(x / scale), the division done in f32.
namespace gecd {

inline constexpr float kFp8E4m3Max = 448.0f;
// Keeps 1/scale finite for an all-zero activation row.
inline constexpr float kMinFp8Scale = 1.0f / (448.0f * 512.0f);

float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);
float F16ToFloat(uint16_t v);
uint16_t FloatToF16(float f);
float E4m3ToFloat(uint8_t v);
uint8_t FloatToE4m3(float f);

// Bulk conversions; `out` must be at least as long as `in`.
void Bf16ToFloat(std::span<const uint16_t> in, float* out);
void F16ToFloat(std::span<const uint16_t> in, float* out);
void E4m3ToFloat(std::span<const uint8_t> in, float* out);

// Quantizes rows of x[rows, cols] to e4m3 values (returned decoded as f32, which is exact) and
// writes one scale per row. This is the per-token activation quantizer and, applied to a
// weight matrix [out, in], the per-output-channel weight quantizer.
void QuantizeRowsE4m3(const float* x, size_t rows, size_t cols, float* x_q, float* scales);

// Same, returning the raw e4m3 codes instead of decoded values.
void QuantizeRowsE4m3Codes(const float* x, size_t rows, size_t cols, uint8_t* codes, float* scales);

}  // namespace gecd

#endif  // GECD_COMMON_NUMERICS_H_

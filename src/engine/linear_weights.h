#ifndef GECD_ENGINE_LINEAR_WEIGHTS_H_
#define GECD_ENGINE_LINEAR_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"

// The host side of loading a Linear for a GPU backend, apart from the device so that it is
// tested where there is none: the weights read from the checkpoint and put in the form the
// device stores (FP8 e4m3 codes with their scales, or bf16), each start-up phase marked
// ("weights read", "FP8 quantization") in the process's StartupPhases.
namespace gecd::engine {

// One Linear, several of the checkpoint's fused along the output dimension (q/k/v, gate/up),
// ready to upload.
struct HostLinear {
  int64_t out = 0, in = 0;
  bool fp8 = false;
  std::vector<uint8_t> codes;  // fp8: e4m3 [out, in]
  std::vector<float> scales;   // fp8: [out] per output channel, or [1] per tensor
  std::vector<uint16_t> bf16;  // otherwise: [out, in]
  std::vector<float> bias;     // [out], zeros for a part without one; empty when none has one
  // Rows quantized here: 0 when every part came as FP8 codes and scales per channel, which are
  // used as stored (a pre-quantized checkpoint costs no quantization at load).
  int64_t rows_quantized = 0;
};

// Reads `modules` (out rows in all, each [*, in]). `fp8`: e4m3, per output channel unless
// `per_tensor` (then one scale for the fused matrix); otherwise bf16, dequantizing an FP8
// checkpoint. Errors name the module: a missing tensor, a shape that is not [*, in], rows that
// do not add up to `out`, scales or biases of the wrong length.
absl::StatusOr<HostLinear> PrepareLinear(const model::Checkpoint& checkpoint,
                                         const std::vector<std::string>& modules, int64_t out,
                                         int64_t in, bool fp8, bool per_tensor);

// bf16 of `values`, converted on all the host's cores (a billion weights on one core would
// dominate start-up).
std::vector<uint16_t> ToBf16(const std::vector<float>& values);

}  // namespace gecd::engine

#endif  // GECD_ENGINE_LINEAR_WEIGHTS_H_

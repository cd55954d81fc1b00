#ifndef GECD_MODEL_QUANTIZER_H_
#define GECD_MODEL_QUANTIZER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

// Offline FP8 quantization of a Hugging Face checkpoint into the compressed-tensors FP8_DYNAMIC
// layout llmcompressor writes, so the output loads in gecd, vLLM and transformers alike.
namespace gecd::model {

struct QuantizeOptions {
  bool attention_fp8 = true;  // q/k/v/o_proj; the MLP's gate/up/down_proj are always quantized
  bool overwrite = false;     // write into a non-empty output directory
  // Called after each Linear with (done, total, module name); the CLI draws a progress bar.
  std::function<void(size_t, size_t, std::string_view)> on_progress;
};

// Reads the float checkpoint in `in_dir` and writes `out_dir`. Quantized Linears become an
// F8_E4M3 `weight` [out, in] plus `weight_scale` [out, 1] in the weight's own dtype: max|row| /
// 448 rounded to that dtype, the codes computed against the rounded scale, which on a bf16 model
// is bit-identical to llmcompressor 0.14. Embeddings, norms, biases, lm_head and any other
// tensor are copied unchanged. Shards keep their names; config.json gains
// `quantization_config`; generation and tokenizer files are copied. The output is reopened with
// Checkpoint::Open before returning.
absl::Status QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir,
                                const QuantizeOptions& options);

// One weight matrix quantized per output channel (FP8_DYNAMIC's scheme) and per tensor (one
// scale for the matrix): relative Frobenius error ||W - dequant(quant(W))|| / ||W|| of each.
struct Fp8Error {
  double per_channel = 0.0;
  double per_tensor = 0.0;
};
Fp8Error MeasureFp8Error(std::span<const float> weight, size_t rows, size_t cols);

}  // namespace gecd::model

#endif  // GECD_MODEL_QUANTIZER_H_

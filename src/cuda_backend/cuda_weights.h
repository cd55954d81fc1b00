#ifndef GECD_CUDA_BACKEND_CUDA_WEIGHTS_H_
#define GECD_CUDA_BACKEND_CUDA_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda_util.h"
#include "model/checkpoint.h"

// The cuda backend's model weights on the device, and their loading: reading the checkpoint,
// fusing q/k/v and gate/up, FP8 quantization at load (common/numerics QuantizeRowsE4m3Codes,
// the CPU backend's rule) or dequantization of an FP8 checkpoint to bf16, and the upload.
// Stepping (cuda_backend/cuda_backend.h) only reads them.
namespace gecd::engine {

// How the checkpoint's Linears are to be stored. FP8 GEMMs need in % 16 == 0 and
// out % 8 == 0; a family whose shapes miss it stays bf16.
struct CudaWeightOptions {
  // Quantize bf16/f32 checkpoints to FP8 (FP8 checkpoints are used as they are); false keeps
  // bf16, dequantizing FP8 checkpoints.
  bool fp8 = true;
  bool attention_fp8 = true;  // false: q/k/v/o stay bf16 (hybrid); the MLP follows `fp8`
  bool per_tensor = false;    // one scale per (fused) matrix instead of one per output channel
};

// One Linear (possibly several fused along the output dimension) on the device.
struct CudaLinear {
  int out = 0, in = 0;
  bool fp8 = false;
  kernels::DeviceBuffer weight;  // bf16 or e4m3 [out, in]
  kernels::DeviceBuffer scale;   // f32 [out] (per channel) or [1] (per tensor); FP8 only
  kernels::DeviceBuffer bias;    // f32 [out] or empty
};

struct CudaLayer {
  kernels::DeviceBuffer input_norm, post_attention_norm;  // f32 [hidden]
  CudaLinear qkv, o, gate_up, down;
};

// Owns every weight of one model on the current device.
struct CudaWeights {
  // Reads and uploads the weights of `checkpoint` to the current device (cudaSetDevice first);
  // `checkpoint` may be closed afterwards. The checkpoint's shape is the caller's to check.
  // Errors: a tensor missing or of the wrong shape (naming it), biases outside q/k/v, out of
  // device memory.
  static absl::StatusOr<CudaWeights> Load(const model::Checkpoint& checkpoint,
                                          const CudaWeightOptions& options);

  // Whether the attention (q/k/v/o) and MLP Linears are FP8 (the same in every layer).
  bool attention_fp8 = false;
  bool mlp_fp8 = false;
  bool per_tensor = false;

  kernels::DeviceBuffer embed;       // bf16 [vocab, hidden]
  kernels::DeviceBuffer lm_head;     // bf16 [vocab, hidden], empty when tied
  kernels::DeviceBuffer final_norm;  // f32 [hidden]
  kernels::DeviceBuffer inv_freq;    // f32 [head_dim / 2]
  std::vector<CudaLayer> layers;
};

}  // namespace gecd::engine

#endif  // GECD_CUDA_BACKEND_CUDA_WEIGHTS_H_

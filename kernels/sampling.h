#ifndef GECD_KERNELS_SAMPLING_H_
#define GECD_KERNELS_SAMPLING_H_

#include <cuda_runtime.h>

#include <cstdint>

// Greedy sampling on the device, so only token ids cross to the host.
namespace gecd::kernels {

// out[r] = argmax_v logits[r, v] (f32 [rows, vocab]), the lowest id among equal maxima (like
// std::max_element on the CPU). NaN entries never win.
cudaError_t LaunchArgmax(const float* logits, int rows, int vocab, int32_t* out,
                         cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_SAMPLING_H_

#ifndef GECD_KERNELS_SAMPLING_H_
#define GECD_KERNELS_SAMPLING_H_

#include <cuda_runtime.h>

#include <cstdint>

// Greedy sampling on the device, so only token ids cross to the host, with the copy bias
// (engine/copy_bias.h, the CPU reference these kernels match).
namespace gecd::kernels {

// One sampled row's copy bias, as the host writes it into the step inputs (8 int32 slots).
struct CopyRow {
  float bias = 0;           // 0: the row has none
  int32_t text_offset = 0;  // of the text in `texts`
  int32_t text_length = 0;
  int32_t end_token = -1;  // the candidate past the text's end; -1: none
  int32_t position = 0;    // the cursor before the row's input token
  int32_t aligned = 1;
  int32_t advance = 0;  // nonzero: move the cursor over the row's input token first
  int32_t reserved = 0;
};
static_assert(sizeof(CopyRow) == 8 * sizeof(int32_t));

// For each row q < rows with a bias: the cursor, moved (AdvanceCopy) over the row's input token
// resolved[sample_rows[q]] when `advance` says so, gives candidate[q] (CopyCandidate; -1 none)
// and bias[q]; rows without a bias get -1 and 0. The input token is read on the device because
// it may be the previous step's sample, which the host has not seen yet.
cudaError_t LaunchCopyCandidates(const CopyRow* copy, const int32_t* texts,
                                 const int32_t* sample_rows, const int32_t* resolved, int rows,
                                 int32_t* candidate, float* bias, cudaStream_t stream);

// out[r] = argmax_v logits[r, v] (f32 [rows, vocab]), the lowest id among equal maxima (like
// std::max_element on the CPU); NaN entries never win. With `candidate` (and `bias`), a row
// whose candidate[r] is a valid id picks it when logits[r, candidate[r]] + bias[r] beats that
// maximum, or ties it with a lower id (BiasedArgmax). The logits themselves are not changed.
cudaError_t LaunchArgmax(const float* logits, int rows, int vocab, const int32_t* candidate,
                         const float* bias, int32_t* out, cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_SAMPLING_H_

#ifndef GECD_CUDA_BACKEND_CUDA_STEP_INPUTS_H_
#define GECD_CUDA_BACKEND_CUDA_STEP_INPUTS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/sampling.h"

// The layout of one cuda backend step's inputs in its int32 staging buffer: the pinned slot the
// host fills and the device buffer it is copied to, which the kernels read. Both sides (and the
// buffers' sizing) take their offsets from here, so they cannot drift apart.
namespace gecd::engine {

// Offsets, in int32 elements from the buffer's start, for a step of `rows` token rows of which
// `samples` sample:
//   [tokens][prev_index][positions][table_offsets] (rows each), [sample_rows], [copy_rows]
//   (one kernels::CopyRow each), [block_ids] (the step's, then the scratch block), [copy texts]
// Every array up to block_ids starts on a 64-int (256-byte) boundary; the copy texts follow the
// block ids directly, and a CopyRow's text_offset counts from the buffer's start.
struct StepInputLayout {
  static constexpr size_t Align(size_t n) { return (n + 63) / 64 * 64; }
  static constexpr size_t kCopyRowInts = sizeof(kernels::CopyRow) / sizeof(int32_t);

  constexpr StepInputLayout(int rows, int samples)
      : prev_index(Align(rows)),
        positions(2 * Align(rows)),
        table_offsets(3 * Align(rows)),
        sample_rows(4 * Align(rows)),
        copy_rows(sample_rows + Align(samples)),
        block_ids(copy_rows + Align(kCopyRowInts * samples)) {}

  // Ints ahead of the copy texts for any step of at most `max_rows` rows, `max_sample_rows`
  // sampled rows and `max_block_ids` block ids (the scratch block's included).
  static constexpr size_t FixedInts(int max_rows, int max_sample_rows, int max_block_ids) {
    return StepInputLayout(max_rows, max_sample_rows).block_ids + Align(max_block_ids);
  }
  // Where the copy texts start when the step carries `num_block_ids` block ids (scratch included).
  constexpr size_t texts(size_t num_block_ids) const { return block_ids + num_block_ids; }

  static constexpr size_t tokens = 0;
  size_t prev_index;
  size_t positions;
  size_t table_offsets;
  size_t sample_rows;
  size_t copy_rows;
  size_t block_ids;
};

}  // namespace gecd::engine

#endif  // GECD_CUDA_BACKEND_CUDA_STEP_INPUTS_H_

#include "engine/backend.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gecd::engine {

absl::Status CheckSequence(const StepBatch& batch, size_t i, int expected_offset,
                           const KvCacheLayout& layout, int64_t max_context) {
  const BatchSequence& s = batch.sequences[i];
  const std::string where = absl::StrCat("step sequence ", i, ": ");
  if (s.num_tokens <= 0 || s.token_offset != expected_offset ||
      s.token_offset + s.num_tokens > batch.num_tokens()) {
    return absl::InvalidArgumentError(where + "token range is empty, out of order or past the end");
  }
  if (s.block_offset < 0 || s.num_blocks < 0 ||
      s.block_offset + s.num_blocks > static_cast<int>(batch.block_ids.size())) {
    return absl::InvalidArgumentError(where + "block range outside block_ids");
  }
  const int64_t end = static_cast<int64_t>(s.start_position) + s.num_tokens;
  if (s.start_position < 0 || end > max_context) {
    return absl::InvalidArgumentError(absl::StrCat(where, "positions ", s.start_position, "..",
                                                   end - 1, " exceed the context limit ",
                                                   max_context));
  }
  if (static_cast<int64_t>(s.num_blocks) * layout.block_size < end) {
    return absl::InvalidArgumentError(absl::StrCat(where, "block table of ", s.num_blocks,
                                                   " blocks cannot hold ", end, " positions"));
  }
  for (int k = 0; k < s.num_blocks; ++k) {
    const int32_t block = batch.block_ids[s.block_offset + k];
    if (block < 0 || block >= layout.num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "block id ", block, " out of range [0, ", layout.num_blocks, ")"));
    }
  }
  if (s.num_drafts < 0 || s.num_drafts >= s.num_tokens || (s.num_drafts > 0 && !s.sample)) {
    return absl::InvalidArgumentError(absl::StrCat(where, s.num_drafts, " drafts in a ",
                                                   s.num_tokens, "-token entry",
                                                   s.sample ? "" : " that does not sample"));
  }
  const BatchCopyBias& c = s.copy;
  if (c.bias != 0) {
    if (!std::isfinite(c.bias) || !s.sample) {
      return absl::InvalidArgumentError(where +
                                        "copy bias not finite or on an entry that does not sample");
    }
    if (c.text_offset < 0 || c.text_length < 0 ||
        c.text_offset + c.text_length > static_cast<int>(batch.copy_tokens.size()) ||
        c.cursor.position < 0 || c.cursor.position > c.text_length) {
      return absl::InvalidArgumentError(where + "copy bias text or cursor outside copy_tokens");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(std::span<const int32_t> ids, int vocab_size) {
  for (int32_t token : ids) {
    if (token < 0 || token >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", token, " out of range [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

void StepBatch::Clear() {
  tokens.clear();
  block_ids.clear();
  sequences.clear();
  copy_tokens.clear();
}

void StepBatch::SetCopyBias(std::span<const int32_t> text, float bias, int32_t end_token,
                            CopyCursor cursor, bool advance) {
  sequences.back().copy = {.bias = bias,
                           .text_offset = static_cast<int>(copy_tokens.size()),
                           .text_length = static_cast<int>(text.size()),
                           .end_token = end_token,
                           .cursor = cursor,
                           .advance = advance};
  copy_tokens.insert(copy_tokens.end(), text.begin(), text.end());
}

void StepBatch::Add(std::span<const int32_t> new_tokens, int start_position,
                    std::span<const int32_t> block_table, bool sample, int previous_sample,
                    int num_drafts) {
  sequences.push_back({.token_offset = static_cast<int>(tokens.size()),
                       .num_tokens = static_cast<int>(new_tokens.size()),
                       .start_position = start_position,
                       .block_offset = static_cast<int>(block_ids.size()),
                       .num_blocks = static_cast<int>(block_table.size()),
                       .sample = sample,
                       .previous_sample = previous_sample,
                       .num_drafts = num_drafts,
                       .copy = {}});
  tokens.insert(tokens.end(), new_tokens.begin(), new_tokens.end());
  block_ids.insert(block_ids.end(), block_table.begin(), block_table.end());
}

int StepBatch::num_sampled() const {
  int n = 0;
  for (const BatchSequence& s : sequences) n += s.sample ? 1 : 0;
  return n;
}

int StepBatch::num_sample_rows() const {
  int n = 0;
  for (const BatchSequence& s : sequences) n += s.sample ? 1 + s.num_drafts : 0;
  return n;
}

absl::Status Backend::Submit(const StepBatch& batch) {
  if (static_cast<int>(pending_.size()) >= max_in_flight()) {
    return absl::FailedPreconditionError("Submit: too many steps in flight; Collect first");
  }
  Pending p;
  p.status = Forward(batch, &p.result);
  if (!p.status.ok()) return p.status;  // nothing queued
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status Backend::Collect(StepResult* result) {
  if (pending_.empty()) return absl::FailedPreconditionError("Collect: no step in flight");
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  *result = std::move(p.result);
  return p.status;
}

}  // namespace gecd::engine

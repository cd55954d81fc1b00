#ifndef GECD_ENGINE_BACKEND_H_
#define GECD_ENGINE_BACKEND_H_

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/copy_bias.h"
#include "engine/kv_cache.h"
#include "model/model_config.h"

// The seam between the engine (which decides what runs) and a backend (which runs the model).
// One step is one forward pass over a batch that mixes prefill chunks of any length,
// single-token decodes and verify entries (a decode followed by draft tokens, each position
// sampled: speculative decoding, where the backend supports it). A batch is plain data (no pointers
// into engine state), so a backend may keep it while it runs asynchronously.
namespace gecd::engine {

// A sampling sequence's copy bias (engine/copy_bias.h); bias 0 is off.
struct BatchCopyBias {
  float bias = 0;
  int text_offset = 0;  // into StepBatch::copy_tokens
  int text_length = 0;
  int32_t end_token = -1;  // the candidate past the end of the text (EOS); -1: none
  CopyCursor cursor;       // where the copy stood before the entry's last token
  // The entry's last token is generated output, so the cursor advances over it before the
  // candidate is taken; false when it is the prompt's (the first sample: the text's start).
  // With drafts, this is about the token before the first draft; the cursor then advances
  // over each draft before the next position's candidate is taken.
  bool advance = false;
};

// One sequence's share of a step: tokens that enter the KV cache at positions
// start_position, start_position + 1, ...; every earlier position is already cached.
struct BatchSequence {
  int token_offset = 0;  // into StepBatch::tokens
  int num_tokens = 0;
  int start_position = 0;
  int block_offset = 0;  // into StepBatch::block_ids: the sequence's block table
  int num_blocks = 0;
  bool sample = false;  // produce the next token from the last of these tokens
  // >= 0: a decode (num_tokens == 1) whose token is the previous Forward's
  // next_tokens[previous_sample]; its slot in StepBatch::tokens is a placeholder. This lets the
  // engine dispatch step N+1 before it has read step N's result.
  int previous_sample = -1;
  // With `sample`: the last num_drafts tokens are drafts, and each of the last 1 + num_drafts
  // positions samples (the choice after the token before the first draft, then after each
  // draft), so one step verifies the drafts as greedy decoding would have produced them.
  // Only for a backend whose verifies_drafts() is true.
  int num_drafts = 0;
  BatchCopyBias copy;
};

struct StepBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> block_ids;
  std::vector<BatchSequence> sequences;
  std::vector<int32_t> copy_tokens;  // the texts the copy biases follow
  bool return_logits = false;

  void Clear();
  // `num_drafts` (BatchSequence::num_drafts) of new_tokens are drafts.
  void Add(std::span<const int32_t> new_tokens, int start_position,
           std::span<const int32_t> block_table, bool sample, int previous_sample = -1,
           int num_drafts = 0);
  // Gives the last added sequence a copy bias over `text`.
  void SetCopyBias(std::span<const int32_t> text, float bias, int32_t end_token, CopyCursor cursor,
                   bool advance);
  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_sampled() const;      // entries that sample
  int num_sample_rows() const;  // positions that sample: 1 + num_drafts per sampling entry
};

struct StepResult {
  // Greedy (argmax, lowest id on ties; after the copy bias where a sequence has one) next token
  // of each sampling position, in batch order: one per sampling entry, 1 + num_drafts for a
  // verify entry.
  std::vector<int32_t> next_tokens;
  // [next_tokens.size(), vocab_size] row-major when the batch asked for them, else empty;
  // the model's own logits, without the copy bias.
  std::vector<float> logits;
};

// The checks every backend makes of sequence `i` of `batch`: its tokens start at
// `expected_offset` (sequences cover the tokens in order) and end inside the batch's, its
// block range lies inside block_ids, its positions fit `max_context` and its block table, its
// block ids are in [0, layout.num_blocks), its drafts (if any) sample and leave one token
// before them, and a copy bias is finite, samples, and has its text inside copy_tokens and its
// cursor inside the text. An InvalidArgument error names the sequence.
absl::Status CheckSequence(const StepBatch& batch, size_t i, int expected_offset,
                           const KvCacheLayout& layout, int64_t max_context);

// InvalidArgument naming the first id outside [0, vocab_size), if any.
absl::Status CheckTokenIds(std::span<const int32_t> ids, int vocab_size);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const model::ModelConfig& config() const = 0;
  // The cache this backend holds; the engine's KvBlockPool must match it.
  virtual const KvCacheLayout& kv_layout() const = 0;
  // Capacity of one step: total tokens, and sequences that sample.
  virtual int max_step_tokens() const = 0;
  virtual int max_batch_size() const = 0;
  // True when Forward samples every position of a verify entry (BatchSequence::num_drafts);
  // the engine sends drafts only to such a backend.
  virtual bool verifies_drafts() const { return false; }

  // Writes the batch's K/V into the cache and fills `result`. A malformed batch (sizes over
  // capacity, ids out of range, a block table too short, a previous_sample the previous
  // Forward did not produce) is an InvalidArgument error and leaves the cache of other
  // sequences untouched. Calls run one at a time, in dispatch order; each one's result is kept
  // for the next one's previous_sample entries even after `result` is reused.
  virtual absl::Status Forward(const StepBatch& batch, StepResult* result) = 0;

  // Asynchronous form of Forward, so a device is not idle while the host post-processes:
  // Submit enqueues a step (validating it first: an InvalidArgument leaves nothing queued) and
  // Collect waits for the oldest submitted step and fills its result. previous_sample entries
  // refer to the previously *submitted* step, which need not be collected yet. At most
  // max_in_flight() steps may be submitted and not collected; Forward must not be mixed with
  // uncollected Submits. The defaults run Forward inside Submit (the CPU backend).
  virtual absl::Status Submit(const StepBatch& batch);
  virtual absl::Status Collect(StepResult* result);
  virtual int max_in_flight() const { return 2; }
  // True when Submit returns before the step has run (a device queue), so a driver gains by
  // submitting step N+1 before collecting step N; false when Submit computes the step itself.
  virtual bool asynchronous() const { return false; }

  // For the logs: what the backend runs (device, weights, kernels), and what its own counters
  // say so far (e.g. a device's busy and idle time); empty where it has nothing to add.
  virtual std::string Describe() const { return {}; }
  virtual std::string StatsSummary() const { return {}; }

 private:
  struct Pending {
    absl::Status status;
    StepResult result;
  };
  std::deque<Pending> pending_;  // the default Submit's finished steps, oldest first
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_BACKEND_H_

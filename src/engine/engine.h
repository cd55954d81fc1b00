#ifndef GECD_ENGINE_ENGINE_H_
#define GECD_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/copy_bias.h"
#include "engine/kv_cache.h"
#include "tokenizer/tokenizer.h"

// Continuous batching over one Backend. The engine owns the sequences and the KV block pool;
// every step it picks which tokens run (decodes first, then prefill chunks of started
// sequences, then new sequences, all under max_step_tokens), runs them as one batch, and turns
// the sampled tokens into events.
//
// Waiting sequences start earliest due first (GenerationParams::due_us; ties in arrival order),
// and nobody overtakes the head of the queue, so a long prompt is not passed over by short ones.
// A sequence starts only when the pool can hold it, and every sequence already running, to
// their longest (prompt + max_new_tokens): a started sequence is never paused or recomputed, it
// runs every step until it finishes. A waiting sequence whose deadline (GenerationParams::
// deadline_us) has passed is dropped before it is prefilled, and reported by TakeExpired().
//
// A step has three phases, public so a pipelined driver can overlap them with device work:
// PlanStep() (scheduling, block allocation), Backend::Forward, CommitStep() (append tokens,
// check stop conditions). Step() runs the three in order. A pipelined driver may plan step N+1
// while step N is in flight (planned, not committed): every sequence that samples in N then
// decodes its pending token in N+1 through BatchSequence::previous_sample, so the Forward
// calls must run in plan order. A sequence that step N finishes (or that is freed) has its
// N+1 entry ignored, and its blocks go back to the pool once no in-flight step writes them.
// The output is the same as Step()'s.
//
// Speculative decoding (EngineOptions::speculate_tokens > 0, on a backend that verifies drafts):
// a sequence's sampling entry (its decode, or its last prompt chunk: the first token too), with
// nothing of the sequence in flight, carries up to k drafts from the user's text
// (engine/drafter.h); the step samples every position, and CommitStep accepts
// drafts while they equal the greedy choice, appends the first choice that differs (or the one
// after the last draft), and rolls the sequence's cache length back over the rejected drafts,
// whose K/V the next step overwrites before any attention reads them. The output is token for
// token that of decoding without drafts. Drafts get only the step budget that decodes, prefill
// chunks and starting sequences leave, shared evenly; k adapts per sequence (doubles after a
// fully accepted draft, halves after a rejection). A sequence whose verify is in flight is not
// planned again until it is committed. Not thread-safe.
namespace gecd::engine {

using SequenceId = uint64_t;

struct GenerationParams {
  int max_new_tokens = 128;
  std::vector<int32_t> stop_token_ids;    // stop in addition to the engine's EOS ids
  std::vector<std::string> stop_strings;  // matched against the generated text; needs a tokenizer
  bool ignore_eos = false;                // keep going past EOS (stop_token_ids still stop)
  // The copy bias (engine/copy_bias.h): > 0 adds that much to the logit of the token that
  // continues copying prompt[copy_begin, copy_end) (the user's text), or of the first EOS id
  // at its end. 0 is off.
  float copy_bias = 0;
  int copy_begin = 0;
  int copy_end = 0;
  // Scheduling, in EngineOptions::clock's microseconds (CLOCK_MONOTONIC by default). due_us:
  // when the sequence should be done, which orders the waiting queue; 0 is the time it was
  // added. deadline_us: past it, a sequence not yet started is dropped; 0 is none.
  int64_t due_us = 0;
  int64_t deadline_us = 0;
};

enum class FinishReason { kNone, kStopToken, kStopString, kLength };

// One generated token. The token that ends a sequence is reported too (and is part of its
// output: callers drop stop tokens or cut at the stop string as they see fit).
struct StepEvent {
  SequenceId id = 0;
  int32_t token = 0;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
};

struct EngineOptions {
  std::vector<int32_t> eos_token_ids;  // usually the model's generation_config
  int max_step_tokens = 0;             // 0: the backend's limit
  int max_batch_size = 0;              // running sequences; 0: the backend's limit
  // Most draft tokens a sequence verifies per step (speculative decoding, see above); 0 is off,
  // and so is a backend that cannot verify (Backend::verifies_drafts).
  int speculate_tokens = 0;
  // Microseconds of the clock that GenerationParams' due and deadline times are in; null is
  // gecd::MonotonicMicros. Tests pass a fake.
  std::function<int64_t()> clock;
};

// The work of one step, as planned: the batch for the backend and who each entry belongs to.
struct StepPlan {
  StepBatch batch;
  std::vector<SequenceId> ids;  // parallel to batch.sequences
  bool empty() const { return ids.empty(); }
};

// Speculative decoding's counters since the engine started.
struct SpeculationStats {
  int64_t accepted = 0;        // drafts equal to the greedy choice, emitted
  int64_t rejected = 0;        // drafts verified and discarded
  int64_t sequence_steps = 0;  // committed entries that sampled: a sequence's sequential steps
  // [n]: sequence-steps that emitted n tokens (n >= 1; the last bucket also counts more).
  std::vector<int64_t> emitted;
};

class Engine {
 public:
  // `tokenizer` may be null (then stop strings are rejected); both must outlive the engine.
  Engine(Backend* backend, const model::Tokenizer* tokenizer, EngineOptions options);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a sequence. Errors: AlreadyExists for a live id; InvalidArgument for an empty
  // prompt, an id outside the vocabulary, max_new_tokens < 1, prompt + max_new_tokens beyond
  // what the cache or the model's positions can hold, stop strings without a tokenizer, or a
  // copy bias that is negative, not finite, or over a span outside the prompt.
  absl::Status AddSequence(SequenceId id, std::vector<int32_t> prompt, GenerationParams params);

  // Cancels a sequence at any point, returning its blocks; NotFound if it is not live (finished
  // sequences are dropped by the step that finishes them).
  absl::Status Free(SequenceId id);

  // The sequences dropped, unstarted, because their deadline passed (by PlanStep), since the
  // last call; they are no longer live.
  std::vector<SequenceId> TakeExpired() { return std::exchange(expired_, {}); }

  // Plans, runs and commits one step. Returns no events when there is nothing to run.
  absl::StatusOr<std::vector<StepEvent>> Step();

  // Plans the next step; at most one step may be in flight (planned, not committed) when it is
  // called. The plan stays valid until it is committed. An empty plan is never in flight.
  const StepPlan& PlanStep();
  // Applies a step's result; steps are committed in plan order. Entries of sequences freed
  // or finished since PlanStep() are skipped.
  std::vector<StepEvent> CommitStep(const StepPlan& plan, const StepResult& result);

  // Sequences left to plan; a pipelined driver also has its in-flight step to commit.
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  // Sequences finished or freed whose blocks wait for an in-flight step to be committed.
  int num_retired() const { return static_cast<int>(retired_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_free_blocks() const { return pool_.num_free(); }
  int num_blocks() const { return pool_.num_blocks(); }
  // Whether steps carry drafts (speculate_tokens > 0 and the backend verifies).
  bool speculates() const { return options_.speculate_tokens > 0; }
  const SpeculationStats& speculation() const { return stats_; }

 private:
  struct Sequence {
    SequenceId id;
    std::vector<int32_t> tokens;  // prompt followed by generated tokens
    int num_prompt = 0;
    int num_computed = 0;     // leading tokens whose K/V are in the cache
    int num_scheduled = 0;    // ... or written by an in-flight step
    int num_pending = 0;      // tokens sampled by an in-flight step, not yet in `tokens`
    int pending_sample = -1;  // where the in-flight step samples it, in its next_tokens
    int in_flight = 0;        // uncommitted steps with an entry for this sequence
    bool retired = false;     // finished or freed; kept only for its in-flight steps
    int64_t due_us = 0;       // params.due_us, or the time it was added
    int max_blocks = 0;       // blocks it holds at its longest (prompt + max_new_tokens)
    GenerationParams params;
    BlockTable blocks;
    std::string text;             // generated text, kept only when there are stop strings
    CopyCursor copy_after;        // the copy bias's cursor after every committed token
    CopyCursor copy_before_last;  // ... and before the last committed one
    int draft_limit = 0;          // drafts its next verify may carry (adaptive)
    bool verifying = false;       // a step with its drafts is in flight
  };

  // Drops the waiting sequences whose deadline has passed into expired_.
  void DropExpired();
  // Starts waiting sequences, earliest due first, while the step's budgets, the batch size and
  // the pool's guarantee (see the class comment) allow.
  void StartWaiting(int* budget, int* prefill_budget);
  // With `drafts` (the entry must sample): a verify entry, seq's next num_tokens tokens (its
  // last prompt chunk, or its last committed token) followed by the drafts.
  void Schedule(Sequence* seq, int num_tokens, std::span<const int32_t> drafts = {});
  // Whether seq's next sampling entry may carry drafts.
  bool CanDraft(const Sequence& seq) const;
  // Gives the entries PlanStep held back (drafting_) their drafts out of `budget` tokens and
  // schedules them.
  void ScheduleDrafting(int budget);
  // Appends a sampled token: copy cursors, stop conditions, the event; true when it finished
  // the sequence (which is then removed).
  bool Append(Sequence* seq, int32_t token, std::vector<StepEvent>* events);
  // The user's text the copy bias and the drafter follow.
  static std::span<const int32_t> CopyText(const Sequence& seq) {
    return std::span<const int32_t>(seq.tokens)
        .subspan(seq.params.copy_begin, seq.params.copy_end - seq.params.copy_begin);
  }
  void SetCopyBias(const Sequence& seq, StepBatch* batch) const;
  FinishReason CheckFinished(Sequence* seq, int32_t token);
  void Remove(SequenceId id);
  // Tokens including the one an in-flight step samples.
  static int Length(const Sequence& seq) {
    return static_cast<int>(seq.tokens.size()) + seq.num_pending;
  }

  Backend* backend_;
  const model::Tokenizer* tokenizer_;
  EngineOptions options_;
  KvBlockPool pool_;
  int64_t max_sequence_tokens_;
  absl::flat_hash_map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // start order, oldest first
  // Not started, by due time, then arrival: the head starts first.
  std::vector<Sequence*> waiting_;
  std::vector<SequenceId> expired_;                 // dropped at their deadline, for TakeExpired
  std::vector<std::unique_ptr<Sequence>> retired_;  // waiting for their in-flight steps
  // Two plans alternate so step N stays valid while N+1 is planned; who each entry belongs
  // to is kept by pointer, since a freed id may be reused while its step is in flight.
  StepPlan plans_[2];
  std::vector<Sequence*> plan_sequences_[2];
  int next_plan_ = 0;
  int sampled_ = 0;  // sampling positions of the plan being built
  StepResult result_;
  SpeculationStats stats_;
  // Scratch: sampling entries PlanStep held back for drafts, with their tokens.
  std::vector<std::pair<Sequence*, int>> drafting_;
  std::vector<int32_t> drafts_;  // scratch: one sequence's drafts
  std::vector<int32_t> entry_;   // scratch: its verify entry
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_ENGINE_H_

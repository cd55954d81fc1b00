#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/assert.h"
#include "common/monotonic_clock.h"
#include "common/status_macros.h"
#include "engine/drafter.h"

namespace gecd::engine {
namespace {

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Engine::Engine(Backend* backend, const model::Tokenizer* tokenizer, EngineOptions options)
    : backend_(backend),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      pool_(backend->kv_layout().num_blocks, backend->kv_layout().block_size) {
  const int step_limit = backend_->max_step_tokens();
  const int batch_limit = backend_->max_batch_size();
  options_.max_step_tokens =
      options_.max_step_tokens > 0 ? std::min(options_.max_step_tokens, step_limit) : step_limit;
  options_.max_batch_size =
      options_.max_batch_size > 0 ? std::min(options_.max_batch_size, batch_limit) : batch_limit;
  // Every running sequence decodes each step, so a batch must fit in one step's budget.
  options_.max_batch_size = std::min(options_.max_batch_size, options_.max_step_tokens);
  if (!options_.clock) options_.clock = MonotonicMicros;
  if (options_.speculate_tokens < 0 || !backend_->verifies_drafts()) options_.speculate_tokens = 0;
  stats_.emitted.assign(options_.speculate_tokens + 2, 0);
  max_sequence_tokens_ = backend_->kv_layout().capacity_tokens();
  const int max_positions = backend_->config().max_position_embeddings;
  if (max_positions > 0)
    max_sequence_tokens_ = std::min<int64_t>(max_sequence_tokens_, max_positions);
}

absl::Status Engine::AddSequence(SequenceId id, std::vector<int32_t> prompt,
                                 GenerationParams params) {
  if (sequences_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is already running"));
  }
  if (prompt.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", id, ": empty prompt"));
  }
  const int vocab = backend_->config().vocab_size;
  for (int32_t token : prompt) {
    if (token < 0 || token >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", id, ": token id ", token,
                                                     " outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (params.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", id, ": max_new_tokens must be at least 1"));
  }
  // The last generated token never enters the cache.
  const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_new_tokens - 1;
  if (needed > max_sequence_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": ", prompt.size(), " prompt tokens + ", params.max_new_tokens,
        " new tokens exceed the ", max_sequence_tokens_, " positions the KV cache and model hold"));
  }
  if (!std::isfinite(params.copy_bias) || params.copy_bias < 0 || params.copy_begin < 0 ||
      params.copy_begin > params.copy_end || params.copy_end > static_cast<int>(prompt.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", id, ": copy bias ", params.copy_bias, " over prompt tokens [",
                     params.copy_begin, ", ", params.copy_end, ") of ", prompt.size(),
                     ": the bias must be finite and >= 0, the span inside the prompt"));
  }
  if (!params.stop_strings.empty() && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", id, ": stop strings need an engine with a tokenizer"));
  }
  auto seq = std::make_unique<Sequence>(Sequence{.id = id,
                                                 .tokens = std::move(prompt),
                                                 .num_prompt = 0,
                                                 .num_computed = 0,
                                                 .params = std::move(params),
                                                 .blocks = BlockTable(&pool_),
                                                 .text = {},
                                                 .copy_after = {},
                                                 .copy_before_last = {}});
  seq->num_prompt = static_cast<int>(seq->tokens.size());
  seq->due_us = seq->params.due_us != 0 ? seq->params.due_us : options_.clock();
  seq->max_blocks = pool_.BlocksFor(needed);
  seq->draft_limit = options_.speculate_tokens;
  // After every sequence due no later: ties keep their arrival order.
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq->due_us,
                                   [](int64_t due, const Sequence* s) { return due < s->due_us; }),
                  seq.get());
  sequences_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

absl::Status Engine::Free(SequenceId id) {
  if (!sequences_.contains(id)) {
    return absl::NotFoundError(absl::StrCat("sequence ", id, " is not running"));
  }
  Remove(id);
  return absl::OkStatus();
}

void Engine::Remove(SequenceId id) {
  auto it = sequences_.find(id);
  // Free checks the id first; CommitStep skips retired (removed) sequences.
  GECD_RELEASE_ASSERT(it != sequences_.end(), absl::StrCat("removing unknown sequence ", id));
  Sequence* seq = it->second.get();
  if (auto r = std::find(running_.begin(), running_.end(), seq); r != running_.end()) {
    running_.erase(r);
  }
  if (auto w = std::find(waiting_.begin(), waiting_.end(), seq); w != waiting_.end()) {
    waiting_.erase(w);
  }
  if (seq->in_flight > 0) {
    // An in-flight step still writes its blocks; CommitStep releases them.
    seq->retired = true;
    retired_.push_back(std::move(it->second));
  }
  sequences_.erase(it);  // otherwise the BlockTable returns the blocks
}

void Engine::Schedule(Sequence* seq, int num_tokens, std::span<const int32_t> drafts) {
  static constexpr int32_t kPlaceholder[1] = {0};
  StepPlan& plan = plans_[next_plan_];
  const int start = seq->num_scheduled;
  const int num_drafts = static_cast<int>(drafts.size());
  const bool sample = start + num_tokens == Length(*seq);
  if (num_drafts > 0) {
    // The last prompt chunk or a decode of the last committed token (nothing of the sequence
    // in flight), then the drafts.
    const auto tokens = std::span<const int32_t>(seq->tokens).subspan(start, num_tokens);
    entry_.assign(tokens.begin(), tokens.end());
    entry_.insert(entry_.end(), drafts.begin(), drafts.end());
    plan.batch.Add(entry_, start, seq->blocks.blocks(), sample, /*previous_sample=*/-1, num_drafts);
  } else if (start < static_cast<int>(seq->tokens.size())) {
    plan.batch.Add(std::span<const int32_t>(seq->tokens).subspan(start, num_tokens), start,
                   seq->blocks.blocks(), sample);
  } else {
    // The token an in-flight step samples: the backend takes it from that step's result.
    plan.batch.Add(kPlaceholder, start, seq->blocks.blocks(), sample, seq->pending_sample);
  }
  if (sample && seq->params.copy_bias > 0) SetCopyBias(*seq, &plan.batch);
  plan.ids.push_back(seq->id);
  plan_sequences_[next_plan_].push_back(seq);
  seq->num_scheduled += num_tokens + num_drafts;
  seq->verifying = num_drafts > 0;
  ++seq->in_flight;
  if (sample) {
    ++seq->num_pending;
    seq->pending_sample = sampled_ + num_drafts;
    sampled_ += 1 + num_drafts;
  }
}

void Engine::SetCopyBias(const Sequence& seq, StepBatch* batch) const {
  const GenerationParams& p = seq.params;
  const std::span<const int32_t> text = CopyText(seq);
  const int32_t end_token = options_.eos_token_ids.empty() ? -1 : options_.eos_token_ids[0];
  // The entry's last token is the prompt's (nothing generated yet), the token an in-flight
  // step samples, or the last committed one: the cursor is taken from before it.
  if (Length(seq) == seq.num_prompt) {
    batch->SetCopyBias(text, p.copy_bias, end_token, CopyCursor{}, /*advance=*/false);
  } else {
    batch->SetCopyBias(text, p.copy_bias, end_token,
                       seq.num_pending > 0 ? seq.copy_after : seq.copy_before_last,
                       /*advance=*/true);
  }
}

const StepPlan& Engine::PlanStep() {
  StepPlan& plan = plans_[next_plan_];
  plan.batch.Clear();
  plan.ids.clear();
  plan_sequences_[next_plan_].clear();
  sampled_ = 0;
  // A pending token that reaches max_new_tokens finishes its sequence: nothing to decode.
  auto done = [](const Sequence& seq, int length) {
    return seq.num_pending > 0 && length - seq.num_prompt >= seq.params.max_new_tokens;
  };
  // Decodes go first: prefill chunks only get what the decodes leave of the token budget.
  int budget = options_.max_step_tokens;
  int decodes = 0;
  for (const Sequence* seq : running_) {
    if (seq->verifying) continue;  // planned again once its verify is committed
    const int length = Length(*seq);
    decodes += length - seq->num_scheduled == 1 && !done(*seq, length) ? 1 : 0;
  }
  int prefill_budget = std::max(0, budget - decodes);

  // Entries that may carry drafts (decodes, last prompt chunks): their tokens are counted now,
  // their drafts get what the rest of the step leaves (ScheduleDrafting).
  drafting_.clear();
  for (Sequence* seq : running_) {
    if (budget == 0) break;
    if (seq->verifying) continue;
    const int length = Length(*seq);
    if (done(*seq, length)) continue;
    const int uncomputed = length - seq->num_scheduled;
    const int want = uncomputed == 1 ? 1 : std::min({uncomputed, prefill_budget, budget});
    if (want == 0) continue;
    if (want == uncomputed && CanDraft(*seq)) {
      drafting_.push_back({seq, want});
      budget -= want;
      if (uncomputed > 1) prefill_budget -= want;
      continue;
    }
    // StartWaiting kept room for every running sequence at its longest.
    const bool reserved = seq->blocks.Reserve(seq->num_scheduled + want);
    GECD_RELEASE_ASSERT(reserved, absl::StrCat("sequence ", seq->id, " found no KV block for ",
                                               seq->num_scheduled + want, " tokens"));
    Schedule(seq, want);
    budget -= want;
    if (uncomputed > 1) prefill_budget -= want;
  }
  DropExpired();
  StartWaiting(&budget, &prefill_budget);
  ScheduleDrafting(budget);
  // An empty plan is never in flight, so its slot is free for the next one.
  if (!plan.empty()) next_plan_ ^= 1;
  return plan;
}

bool Engine::CanDraft(const Sequence& seq) const {
  // Drafts follow the committed output, so nothing of the sequence may be in flight; the
  // last token leaves no room for a draft.
  const int generated = Length(seq) - seq.num_prompt;
  return speculates() && seq.num_pending == 0 && seq.in_flight == 0 &&
         generated + 1 < seq.params.max_new_tokens && seq.params.copy_end > seq.params.copy_begin;
}

void Engine::ScheduleDrafting(int budget) {
  const int32_t end_token = options_.eos_token_ids.empty() ? -1 : options_.eos_token_ids[0];
  const int n = static_cast<int>(drafting_.size());
  for (int i = 0; i < n; ++i) {
    auto [seq, chunk] = drafting_[i];
    const int generated = Length(*seq) - seq->num_prompt;
    // An even share of what is left, the unused part of a share passing to the next ones.
    const int room =
        std::min({seq->draft_limit, budget / (n - i), seq->params.max_new_tokens - generated - 1});
    DraftFromText(CopyText(*seq), std::span<const int32_t>(seq->tokens).subspan(seq->num_prompt),
                  seq->copy_after.position, end_token, room, &drafts_);
    const int num_tokens = chunk + static_cast<int>(drafts_.size());
    // Within prompt + max_new_tokens - 1 positions, which StartWaiting kept room for.
    const bool reserved = seq->blocks.Reserve(seq->num_scheduled + num_tokens);
    GECD_RELEASE_ASSERT(reserved, absl::StrCat("sequence ", seq->id, " found no KV block for ",
                                               seq->num_scheduled + num_tokens, " tokens"));
    Schedule(seq, chunk, drafts_);
    budget -= static_cast<int>(drafts_.size());
  }
}

void Engine::DropExpired() {
  if (waiting_.empty()) return;
  const int64_t now = options_.clock();
  for (size_t i = 0; i < waiting_.size();) {
    const Sequence* seq = waiting_[i];
    if (seq->params.deadline_us == 0 || seq->params.deadline_us > now) {
      ++i;
      continue;
    }
    expired_.push_back(seq->id);
    Remove(seq->id);  // erases waiting_[i]
  }
}

void Engine::StartWaiting(int* budget, int* prefill_budget) {
  if (waiting_.empty()) return;
  // The blocks the running sequences may still take, at their longest.
  int64_t promised = 0;
  for (const Sequence* seq : running_) {
    promised += seq->max_blocks - static_cast<int64_t>(seq->blocks.blocks().size());
  }
  size_t started = 0;
  while (started < waiting_.size() && *budget > 0 && *prefill_budget > 0 &&
         static_cast<int>(running_.size()) < options_.max_batch_size) {
    Sequence* seq = waiting_[started];
    if (pool_.num_free() - promised < seq->max_blocks) break;  // the head waits for room
    const int want = std::min({Length(*seq), *prefill_budget, *budget});
    const bool reserved = seq->blocks.Reserve(want);  // within pool_.num_free() - promised
    GECD_RELEASE_ASSERT(reserved,
                        absl::StrCat("sequence ", seq->id, " found no KV block to start"));
    promised += seq->max_blocks - static_cast<int64_t>(seq->blocks.blocks().size());
    running_.push_back(seq);
    if (want == Length(*seq) && CanDraft(*seq)) {
      drafting_.push_back({seq, want});  // the whole prompt: the first token may come drafted
    } else {
      Schedule(seq, want);
    }
    *budget -= want;
    *prefill_budget -= want;
    ++started;
  }
  waiting_.erase(waiting_.begin(), waiting_.begin() + started);
}

FinishReason Engine::CheckFinished(Sequence* seq, int32_t token) {
  const GenerationParams& p = seq->params;
  if (!p.ignore_eos && Contains(options_.eos_token_ids, token)) return FinishReason::kStopToken;
  if (Contains(p.stop_token_ids, token)) return FinishReason::kStopToken;
  if (!p.stop_strings.empty()) {
    const size_t old_size = seq->text.size();
    seq->text += tokenizer_->TokenBytes(token);
    for (const std::string& stop : p.stop_strings) {
      if (stop.empty()) continue;
      // Only a match that ends in the new bytes is new.
      const size_t from = old_size >= stop.size() - 1 ? old_size - (stop.size() - 1) : 0;
      if (seq->text.find(stop, from) != std::string::npos) return FinishReason::kStopString;
    }
  }
  const int generated = static_cast<int>(seq->tokens.size()) - seq->num_prompt;
  if (generated >= p.max_new_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

bool Engine::Append(Sequence* seq, int32_t token, std::vector<StepEvent>* events) {
  seq->tokens.push_back(token);
  if (seq->params.copy_bias > 0 || speculates()) {
    seq->copy_before_last = seq->copy_after;
    seq->copy_after = AdvanceCopy(CopyText(*seq), seq->copy_after, token);
  }
  const FinishReason reason = CheckFinished(seq, token);
  events->push_back(
      {.id = seq->id, .token = token, .finished = reason != FinishReason::kNone, .reason = reason});
  if (reason == FinishReason::kNone) return false;
  Remove(seq->id);
  return true;
}

std::vector<StepEvent> Engine::CommitStep(const StepPlan& plan, const StepResult& result) {
  const std::vector<Sequence*>& owners = plan_sequences_[&plan == &plans_[0] ? 0 : 1];
  std::vector<StepEvent> events;
  size_t sampled = 0;
  for (size_t k = 0; k < plan.ids.size(); ++k) {
    const BatchSequence& entry = plan.batch.sequences[k];
    const int32_t* choices = result.next_tokens.data() + sampled;
    sampled += entry.sample ? 1 + entry.num_drafts : 0;
    Sequence* seq = owners[k];
    --seq->in_flight;
    if (seq->retired) continue;  // finished or freed while the step ran
    if (!entry.sample) {
      seq->num_computed = entry.start_position + entry.num_tokens;
      continue;
    }
    --seq->num_pending;
    // Drafts count while they equal the greedy choice after the tokens before them; the
    // choice after the last accepted one is the model's own.
    const int num_drafts = entry.num_drafts;
    const int32_t* drafts =
        plan.batch.tokens.data() + entry.token_offset + entry.num_tokens - num_drafts;
    int accepted = 0;
    while (accepted < num_drafts && drafts[accepted] == choices[accepted]) ++accepted;
    seq->num_computed = entry.start_position + entry.num_tokens - num_drafts + accepted;
    if (num_drafts > 0) {
      // Roll back over the rejected drafts: the next step writes their positions again
      // before its attention reads them. Nothing else of the sequence is in flight.
      seq->num_scheduled = seq->num_computed;
      seq->verifying = false;
      seq->draft_limit = accepted == num_drafts
                             ? std::min(options_.speculate_tokens, 2 * seq->draft_limit)
                             : std::max(1, seq->draft_limit / 2);
    }
    int emitted = 0;
    bool finished = false;
    while (emitted <= accepted && !finished) finished = Append(seq, choices[emitted++], &events);
    // A stop inside the accepted drafts leaves the rest of them unused: counted rejected.
    const int used = std::min(emitted, accepted);
    ++stats_.sequence_steps;
    stats_.accepted += used;
    stats_.rejected += num_drafts - used;
    if (!stats_.emitted.empty()) {
      ++stats_.emitted[std::min<size_t>(emitted, stats_.emitted.size() - 1)];
    }
  }
  std::erase_if(retired_, [](const std::unique_ptr<Sequence>& s) { return s->in_flight == 0; });
  return events;
}

absl::StatusOr<std::vector<StepEvent>> Engine::Step() {
  const StepPlan& plan = PlanStep();
  if (plan.empty()) return std::vector<StepEvent>();
  RETURN_IF_ERROR(backend_->Forward(plan.batch, &result_));
  return CommitStep(plan, result_);
}

}  // namespace gecd::engine

#ifndef GECD_LOADGEN_TYPING_SESSION_H_
#define GECD_LOADGEN_TYPING_SESSION_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loadgen/latency_histogram.h"
#include "loadgen/load_runner.h"
#include "nlohmann/json.hpp"

// gecd-load's typing-session workload (--typing-sessions): what the server's sentence cache
// saves a writing assistant, which sends the whole text field again after every pause in typing
// although one sentence changed. Three parts: the texts (a pure function of the input sentences
// and a seed), the runner that sends them, and the report.
namespace gecd::loadgen {

// The workload's shape, as gecd-load's --typing-* flags and --seed set it. A plain value.
struct TypingSessionOptions {
  int sessions = 0;  // 0: the workload is off
  int edits = 10;    // texts per session: one as first typed, then one after each edit
  int paragraphs = 3;
  int sentences_per_paragraph = 5;
  uint64_t seed = 1;
};

// One session's text, as sentences: versions[0] as first typed, versions[e] after the e-th
// edit. Consecutive versions differ in exactly one sentence. A plain value.
struct TypingSession {
  std::vector<std::vector<std::string>> versions;
};

// The sessions a run sends, deterministic for `lines` and options.seed. Each line, tokenized as
// JFLEG's sources are ("he do n't know , he said ."), is one sentence as typed (empty ones
// dropped): joined back by ptb_text::PtbDetokenize, its first letter (after any opening quotes
// or brackets) upper-cased when it is an ASCII one ("He don't know, he said."). Session s's
// text is the n = paragraphs x sentences_per_paragraph consecutive sentences from (s x n) mod
// (sentences - n + 1), so sessions start from distinct windows until the input runs out. Each
// edit draws one of its sentences and changes one of its words: inserts a word
// ("really", "very", "also", "just"), deletes one, or misspells one (its letters reversed, or an
// "s" added to a word of 3 letters or fewer, or one that reads the same reversed). The first and
// last words are never deleted or misspelt and nothing is inserted before the first, so the
// sentence keeps its capital and its end and the server splits every version's text where it
// split the first (a one-word sentence, rare, gets the new word after it). INVALID_ARGUMENT for
// fewer non-empty lines than a text needs, or an option out of range (sessions, paragraphs and
// sentences at least 1, edits at least 0).
absl::StatusOr<std::vector<TypingSession>> MakeTypingSessions(const std::vector<std::string>& lines,
                                                              const TypingSessionOptions& options);

// The text an editor sends for one version: sentences_per_paragraph sentences a paragraph,
// joined by a space, paragraphs by a blank line ("\n\n").
std::string TypingText(const std::vector<std::string>& sentences, int sentences_per_paragraph);

// What one pass over the sessions' texts got back. A plain value: RunTypingSessions's threads
// each fill their own and merge them once joined.
struct TypingPass {
  uint64_t requests = 0;
  uint64_t ok = 0;
  std::map<std::string, uint64_t> errors;  // by gRPC status code name
  // Of OK answers only: their sentences (CorrectResponse.sentences), those answered from the
  // cache (sentences[i].cached), and the engine's tokens (prompt_tokens and output_tokens, which
  // count 0 for a cached sentence).
  uint64_t sentences = 0;
  uint64_t cached = 0;
  uint64_t prompt_tokens = 0;
  uint64_t output_tokens = 0;
  LatencyHistogram ok_latency;  // microseconds, per request
  double elapsed_s = 0;

  // Engine tokens (prompt + output) per OK answer; 0 with none.
  double tokens_per_request() const;
  // The share of sentences answered from the cache; 0 with none.
  double cached_rate() const;
};

// The same texts sent twice: first with `cache: false` (so that the cached pass does not find
// them already there: such a request neither reads nor writes the server's cache), then with
// the cache on.
struct TypingResult {
  TypingPass cache_off;
  TypingPass cache_on;

  // Engine tokens per request without the cache over those with it; 0 when either has none.
  double tokens_reduction() const;
};

// Sends every session's texts in order, each once its predecessor is answered (an editor
// waits for the answer to the text it sent), with unary Correct, max(config.concurrency, 1)
// sessions at a time. From `config` it takes the connection (targets, channels, TLS,
// authorization), deadline_ms and priority, nothing else. Session s always goes over channel
// s mod channels, one connection, so that all its texts reach the same server worker and its
// cache (workers do not share theirs). A failed request is counted by its code and the session
// goes on. UNAVAILABLE naming the target when a channel does not connect within 5 s,
// INVALID_ARGUMENT for no targets or fewer channels than targets.
absl::StatusOr<TypingResult> RunTypingSessions(const RunConfig& config,
                                               const std::vector<TypingSession>& sessions,
                                               int sentences_per_paragraph);

// The summary: the workload's shape, then a line per pass (requests, sentences, the cached
// share, engine tokens per request, p50/p99 latency, errors) and how many times fewer tokens
// the cache left the engine.
void WriteTypingTable(const TypingSessionOptions& options, const TypingResult& result,
                      std::ostream& out);

// The same for machines: the options, "cache_off" and "cache_on" with every TypingPass field
// (latencies in ms) and "tokens_reduction" (null when undefined).
nlohmann::json TypingJson(const TypingSessionOptions& options, const TypingResult& result);

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_TYPING_SESSION_H_

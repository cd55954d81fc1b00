#ifndef GECD_WORKER_SENTENCE_CACHE_H_
#define GECD_WORKER_SENTENCE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "config/config.h"

// Sentences a worker corrected before, so that a text re-sent after a small change (an editor
// sends the whole field after every pause in typing) costs only its changed sentences.
namespace gecd::worker {

// What the cache keeps of one corrected sentence.
struct CachedSentence {
  std::string corrected;
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
};

// An LRU map from (settings fingerprint, output cap, exact sentence text) to its correction,
// bounded in bytes: every entry counts its key, its corrected text and kEntryOverhead, and the
// least recently used entries are dropped as soon as the total would pass the bound, so it never
// holds more (an entry larger than the whole bound is not kept). Thread-safe.
class SentenceCache {
 public:
  // The bookkeeping of one entry beyond its strings (list node, hash slot, sizes).
  static constexpr size_t kEntryOverhead = 96;

  // `max_bytes` 0: nothing is ever kept.
  explicit SentenceCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  // The fingerprint of everything in the config that changes a sentence's correction: the model
  // (its path and tokenizer), the prompt template, decoding (output cap, copy bias) and the
  // spelling stage's settings. Entries of another fingerprint never match.
  static std::string Fingerprint(const config::Config& config);

  // The correction of `sentence` under `fingerprint` with output capped at `max_new_tokens`,
  // marking it recently used; nullopt when absent.
  std::optional<CachedSentence> Get(std::string_view fingerprint, int max_new_tokens,
                                    std::string_view sentence) ABSL_LOCKS_EXCLUDED(mu_);
  void Put(std::string_view fingerprint, int max_new_tokens, std::string_view sentence,
           CachedSentence value) ABSL_LOCKS_EXCLUDED(mu_);

  size_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t entries() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string key;
    CachedSentence value;
    size_t Bytes() const { return key.size() + value.corrected.size() + kEntryOverhead; }
  };
  static std::string Key(std::string_view fingerprint, int max_new_tokens,
                         std::string_view sentence);

  const size_t max_bytes_;
  mutable Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  absl::flat_hash_map<std::string_view, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_SENTENCE_CACHE_H_

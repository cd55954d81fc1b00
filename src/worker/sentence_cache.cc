#include "worker/sentence_cache.h"

#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace gecd::worker {

std::string SentenceCache::Fingerprint(const config::Config& config) {
  // Everything that can change what the engine answers for one sentence; a worker's config is
  // fixed for its life, so the fingerprint only keeps caches of different settings apart (and
  // documents what a hit assumes).
  const std::string settings = absl::StrCat(
      "model.dir=", config.model.dir, "\nmodel.prompt_template=", config.model.prompt_template,
      "\nmodel.max_output_tokens=", config.model.max_output_tokens,
      "\nmodel.copy_bias=", config.model.copy_bias, "\nengine.backend=", config.engine.backend,
      "\nengine.quantization=", config.engine.quantization,
      "\nengine.attention_fp8=", config.engine.attention_fp8,
      "\nengine.fp8_scaling=", config.engine.fp8_scaling,
      "\nspelling.dictionary=", config.spelling.dictionary,
      "\nspelling.lexicon=", config.spelling.lexicon,
      "\nspelling.min_count=", config.spelling.min_count,
      "\nspelling.max_lookups=", config.spelling.max_lookups);
  return absl::StrCat(absl::Hex(absl::HashOf(settings), absl::kZeroPad16));
}

std::string SentenceCache::Key(std::string_view fingerprint, int max_new_tokens,
                               std::string_view sentence) {
  return absl::StrCat(absl::string_view(fingerprint.data(), fingerprint.size()), ":",
                      max_new_tokens, ":", absl::string_view(sentence.data(), sentence.size()));
}

std::optional<CachedSentence> SentenceCache::Get(std::string_view fingerprint, int max_new_tokens,
                                                 std::string_view sentence) {
  if (max_bytes_ == 0) return std::nullopt;
  const std::string key = Key(fingerprint, max_new_tokens, sentence);
  MutexLock lock(&mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators (and the key's view) stay valid
  return it->second->value;
}

void SentenceCache::Put(std::string_view fingerprint, int max_new_tokens, std::string_view sentence,
                        CachedSentence value) {
  Entry entry{.key = Key(fingerprint, max_new_tokens, sentence), .value = std::move(value)};
  if (entry.Bytes() > max_bytes_) return;
  MutexLock lock(&mu_);
  if (const auto it = index_.find(entry.key); it != index_.end()) {
    const std::list<Entry>::iterator old = it->second;
    bytes_ -= old->Bytes();
    index_.erase(it);  // the view into the old entry's key goes before the entry
    lru_.erase(old);
  }
  bytes_ += entry.Bytes();
  lru_.push_front(std::move(entry));
  index_.emplace(lru_.front().key, lru_.begin());
  while (bytes_ > max_bytes_) {
    bytes_ -= lru_.back().Bytes();
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

size_t SentenceCache::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

size_t SentenceCache::entries() const {
  MutexLock lock(&mu_);
  return lru_.size();
}

}  // namespace gecd::worker

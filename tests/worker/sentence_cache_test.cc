#include "worker/sentence_cache.h"

#include <string>

#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

// An entry's size as the cache counts it.
size_t EntryBytes(std::string_view fingerprint, int cap, std::string_view sentence,
                  std::string_view corrected) {
  return fingerprint.size() + 1 + std::to_string(cap).size() + 1 + sentence.size() +
         corrected.size() + SentenceCache::kEntryOverhead;
}

TEST(SentenceCacheTest, AHitNeedsTheSameSentenceFingerprintAndCap) {
  SentenceCache cache(1 << 20);
  cache.Put("f1", 128, "She go home.", {.corrected = "She goes home.", .output_tokens = 4});
  const auto hit = cache.Get("f1", 128, "She go home.");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->corrected, "She goes home.");
  EXPECT_EQ(hit->output_tokens, 4u);
  EXPECT_FALSE(cache.Get("f2", 128, "She go home.").has_value());
  EXPECT_FALSE(cache.Get("f1", 64, "She go home.").has_value());
  EXPECT_FALSE(cache.Get("f1", 128, "She go home. ").has_value());
  EXPECT_FALSE(cache.Get("f1", 128, "she go home.").has_value());
}

TEST(SentenceCacheTest, TheLeastRecentlyUsedGoFirstAndTheBoundHoldsUnderPressure) {
  const size_t one = EntryBytes("f", 1, "sentence 00", "SENTENCE 00");
  SentenceCache cache(3 * one);
  cache.Put("f", 1, "sentence 00", {.corrected = "SENTENCE 00"});
  cache.Put("f", 1, "sentence 01", {.corrected = "SENTENCE 01"});
  cache.Put("f", 1, "sentence 02", {.corrected = "SENTENCE 02"});
  EXPECT_EQ(cache.bytes(), 3 * one);
  ASSERT_TRUE(cache.Get("f", 1, "sentence 00").has_value());  // now the most recent
  cache.Put("f", 1, "sentence 03", {.corrected = "SENTENCE 03"});
  EXPECT_TRUE(cache.Get("f", 1, "sentence 00").has_value());
  EXPECT_FALSE(cache.Get("f", 1, "sentence 01").has_value());  // the least recently used
  EXPECT_EQ(cache.entries(), 3u);
  // Thousands of inserts of every size: never above the bound.
  for (int i = 0; i < 5000; ++i) {
    const std::string sentence = "s" + std::to_string(i) + std::string(i % 97, 'x');
    cache.Put("f", 1, sentence, {.corrected = sentence + "!"});
    ASSERT_LE(cache.bytes(), cache.max_bytes()) << i;
  }
  EXPECT_GT(cache.entries(), 0u);
}

TEST(SentenceCacheTest, ReplacingAnEntryCountsItOnce) {
  SentenceCache cache(1 << 20);
  cache.Put("f", 1, "a", {.corrected = "A"});
  cache.Put("f", 1, "a", {.corrected = "AAAA"});
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.bytes(), EntryBytes("f", 1, "a", "AAAA"));
  EXPECT_EQ(cache.Get("f", 1, "a")->corrected, "AAAA");
}

TEST(SentenceCacheTest, AnEntryLargerThanTheBoundOrAZeroBoundKeepsNothing) {
  SentenceCache small(200);
  small.Put("f", 1, std::string(300, 'a'), {.corrected = "x"});
  EXPECT_EQ(small.entries(), 0u);
  EXPECT_EQ(small.bytes(), 0u);
  SentenceCache off(0);
  off.Put("f", 1, "a", {.corrected = "A"});
  EXPECT_FALSE(off.Get("f", 1, "a").has_value());
}

TEST(SentenceCacheTest, TheFingerprintFollowsTheSettingsThatChangeAnAnswer) {
  config::Config a;
  config::Config b = a;
  EXPECT_EQ(SentenceCache::Fingerprint(a), SentenceCache::Fingerprint(b));
  b.model.prompt_template = "Fix: {text}";
  EXPECT_NE(SentenceCache::Fingerprint(a), SentenceCache::Fingerprint(b));
  b = a;
  b.model.copy_bias = 1.5;
  EXPECT_NE(SentenceCache::Fingerprint(a), SentenceCache::Fingerprint(b));
  b = a;
  b.spelling.max_lookups = 2;
  EXPECT_NE(SentenceCache::Fingerprint(a), SentenceCache::Fingerprint(b));
  b = a;
  b.server.max_in_flight = 7;  // admission only: same answers
  EXPECT_EQ(SentenceCache::Fingerprint(a), SentenceCache::Fingerprint(b));
}

}  // namespace
}  // namespace gecd::worker

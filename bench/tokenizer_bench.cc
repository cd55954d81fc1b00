// Encode throughput of the tokenizers on Brown corpus sentences (the "brown" rows of the
// checked-in golden files). Counters: tokens/s and bytes/s. "Warm" runs repeat the same
// sentences, so after the first pass BPE words come from the word cache, the steady state of a
// server; "Cold" runs load a fresh tokenizer (untimed) before each pass.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/test_paths.h"
#include "testing/tokenizer_goldens.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace gecd::model {
namespace {

const std::vector<std::string>& BrownSentences() {
  static const std::vector<std::string> sentences = [] {
    std::vector<std::string> out;
    auto goldens = gecd::testing::ReadTokenizerGoldens(
        gecd::testing::FixturePath("tokenizers/gpt2_golden.jsonl"));
    if (goldens.ok()) {
      for (auto& golden : *goldens) {
        if (golden.kind == "brown") out.push_back(std::move(golden.text));
      }
    }
    return out;
  }();
  return sentences;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& name) {
  if (name == "sentencepiece") {
    auto sp = SentencePieceTokenizer::LoadFromFile(
        gecd::testing::FixturePath("tokenizers/sp_brown/tokenizer.model"));
    if (!sp.ok()) return sp.status();
    return std::unique_ptr<Tokenizer>(std::move(*sp));
  }
  const auto path = gecd::testing::SharedDataPath("tokenizers/" + name + "/tokenizer.json");
  if (!path.has_value()) return absl::NotFoundError("../shared is absent");
  auto bpe = BpeTokenizer::LoadFromFile(*path);
  if (!bpe.ok()) return bpe.status();
  return std::unique_ptr<Tokenizer>(std::move(*bpe));
}

// Encodes every sentence once; returns false (after flagging `state`) on an error.
bool EncodeAll(const Tokenizer& tokenizer, benchmark::State& state, int64_t* tokens,
               int64_t* bytes) {
  for (const std::string& sentence : BrownSentences()) {
    auto ids = tokenizer.Encode(sentence);
    if (!ids.ok()) {
      state.SkipWithError(std::string(ids.status().message()).c_str());
      return false;
    }
    benchmark::DoNotOptimize(ids->data());
    *tokens += static_cast<int64_t>(ids->size());
    *bytes += static_cast<int64_t>(sentence.size());
  }
  return true;
}

void SetCounters(benchmark::State& state, int64_t tokens, int64_t bytes) {
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(bytes);
}

void BM_EncodeWarm(benchmark::State& state, const std::string& name) {
  auto tokenizer = Load(name);
  if (!tokenizer.ok()) {
    state.SkipWithError(std::string(tokenizer.status().message()).c_str());
    return;
  }
  if (BrownSentences().empty()) {
    state.SkipWithError("no Brown sentences in tests/fixtures/tokenizers/gpt2_golden.jsonl");
    return;
  }
  int64_t tokens = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    if (!EncodeAll(**tokenizer, state, &tokens, &bytes)) break;
  }
  SetCounters(state, tokens, bytes);
}

void BM_EncodeCold(benchmark::State& state, const std::string& name) {
  if (BrownSentences().empty()) {
    state.SkipWithError("no Brown sentences in tests/fixtures/tokenizers/gpt2_golden.jsonl");
    return;
  }
  int64_t tokens = 0;
  int64_t bytes = 0;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer;
  for (auto _ : state) {
    state.PauseTiming();
    tokenizer = Load(name);  // the previous one is freed here, untimed too
    state.ResumeTiming();
    if (!tokenizer.ok()) {
      state.SkipWithError(std::string(tokenizer.status().message()).c_str());
      break;
    }
    if (!EncodeAll(**tokenizer, state, &tokens, &bytes)) break;
  }
  SetCounters(state, tokens, bytes);
}

BENCHMARK_CAPTURE(BM_EncodeWarm, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeWarm, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeWarm, sentencepiece, std::string("sentencepiece"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeCold, gpt2, std::string("gpt2"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_EncodeCold, qwen3, std::string("qwen3"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace gecd::model

BENCHMARK_MAIN();

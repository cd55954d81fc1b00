// write_bench_model DIR: writes the random model the daemon benchmark serves
// (scripts/bench_daemon.sh): BenchmarkModelOptions() (~9M parameters: hidden 256, 6 layers,
// intermediate 768, vocab 8000, 8 heads, 4 kv heads, bf16) with a byte-level tokenizer.json
// (one token per byte), and no EOS token, so every request generates exactly its
// max_output_tokens (a random model would otherwise stop whenever argmax hits id 2).
#include <cstdio>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "testing/byte_level_tokenizer.h"
#include "testing/random_model.h"

namespace {

bool DropEos(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return false;
  j["eos_token_id"] = nullptr;
  std::ofstream(path) << j.dump(2);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // A flag is never a directory name: `--help` must not create a model in ./--help.
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const absl::Status written =
      gecd::testing::WriteRandomModel(dir, gecd::testing::BenchmarkModelOptions());
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return 1;
  }
  gecd::testing::WriteByteLevelTokenizer(dir);
  if (!DropEos(dir + "/config.json") || !DropEos(dir + "/generation_config.json")) {
    std::fprintf(stderr, "cannot rewrite the eos_token_id of %s\n", dir.c_str());
    return 1;
  }
  return 0;
}

// write_bench_model [--shape NAME [--layers N]] DIR: writes a random model for the daemon
// benchmarks (scripts/bench_daemon.sh, scripts/gpu_daemon_bench.sh), with a byte-level
// tokenizer.json (one token per byte) and no EOS token, so every request generates exactly its
// max_output_tokens (a random model would otherwise stop whenever argmax hits id 2).
//   - no --shape: BenchmarkModelOptions() (~9M parameters: hidden 256, 6 layers, intermediate
//     768, vocab 8000, 8 heads, 4 kv heads, bf16), the CPU benchmark's model;
//   - --shape llama1b | qwen05b | tiny: bench_model.h's fast writer of that shape (seconds for
//     1B parameters), with --layers N instead of the shape's own count.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench_model.h"
#include "nlohmann/json.hpp"
#include "testing/byte_level_tokenizer.h"
#include "testing/random_model.h"

namespace {

// No eos_token_id in `path`, when it exists.
bool DropEos(const std::string& path) {
  if (!std::filesystem::exists(path)) return true;
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return false;
  j["eos_token_id"] = nullptr;
  std::ofstream(path) << j.dump(2);
  return true;
}

int Usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--shape llama1b|qwen05b|tiny [--layers N]] DIR\n", argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape, dir;
  int layers = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--shape" && i + 1 < argc) {
      shape = argv[++i];
    } else if (arg == "--layers" && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
      if (layers < 1) return Usage(argv[0]);
    } else if (arg.empty() || arg[0] == '-' || !dir.empty()) {
      // A flag is never a directory name: `--help` must not create a model in ./--help.
      return Usage(argv[0]);
    } else {
      dir = arg;
    }
  }
  if (dir.empty() || (layers > 0 && shape.empty())) return Usage(argv[0]);
  if (shape.empty()) {
    const absl::Status written =
        gecd::testing::WriteRandomModel(dir, gecd::testing::BenchmarkModelOptions());
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
  } else {
    const gecd::Shape s = gecd::ShapeFor(shape);
    if (s.name != shape) {
      std::fprintf(stderr, "unknown --shape %s\n", shape.c_str());
      return 2;
    }
    if (!gecd::WriteBenchCheckpoint(s, layers > 0 ? layers : s.layers, dir)) {
      std::fprintf(stderr, "cannot write the model into %s\n", dir.c_str());
      return 1;
    }
  }
  gecd::testing::WriteByteLevelTokenizer(dir);
  if (!DropEos(dir + "/config.json") || !DropEos(dir + "/generation_config.json")) {
    std::fprintf(stderr, "cannot rewrite the eos_token_id of %s\n", dir.c_str());
    return 1;
  }
  return 0;
}

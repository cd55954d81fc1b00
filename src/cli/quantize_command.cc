#include <cstdio>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/progress_bar.h"
#include "model/quantizer.h"

namespace gecd::cli {

int RunQuantize(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> specs = {
      {"in", true, "input model directory (F32/BF16/F16 safetensors)"},
      {"out", true, "output directory for the FP8 (compressed-tensors) model"},
      {"no-attention-fp8", false, "keep q/k/v/o_proj in the original dtype (MLP only FP8)"},
      {"force", false, "write into --out even if it is not empty"},
  };
  auto args = Args::Parse(argv, specs);
  absl::StatusOr<std::string> in = args.ok() ? args->Required("in") : args.status();
  absl::StatusOr<std::string> out = args.ok() ? args->Required("out") : args.status();
  if (!in.ok() || !out.ok() || !args->positionals().empty()) {
    const absl::Status error = !in.ok() ? in.status() : out.status();
    if (!error.ok()) std::fprintf(stderr, "gecd quantize: %s\n", error.ToString().c_str());
    std::fprintf(stderr,
                 "usage: gecd quantize --in DIR --out DIR [--no-attention-fp8] [--force]\n%s",
                 FlagHelp(specs).c_str());
    return 2;
  }

  model::QuantizeOptions options;
  options.attention_fp8 = !args->Has("no-attention-fp8");
  options.overwrite = args->Has("force");
  std::unique_ptr<ProgressBar> bar;
  options.on_progress = [&bar](size_t done, size_t total, std::string_view module) {
    if (!bar) bar = std::make_unique<ProgressBar>("quantize", total);
    bar->Advance(1, std::string(module));
  };
  const absl::Status status = model::QuantizeCheckpoint(*in, *out, options);
  bar.reset();
  if (!status.ok()) {
    std::fprintf(stderr, "gecd quantize: %s\n", status.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "gecd quantize: wrote %s (%s FP8)\n", out->c_str(),
               options.attention_fp8 ? "attention and MLP" : "MLP");
  return 0;
}

}  // namespace gecd::cli

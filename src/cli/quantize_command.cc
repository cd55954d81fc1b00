#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "common/args.h"
#include "common/progress_bar.h"
#include "common/status_macros.h"
#include "model/quantizer.h"

namespace gecd::cli {
namespace {

struct QuantizeRequest {
  std::string in, out;
  model::QuantizeOptions options;
};

absl::StatusOr<QuantizeRequest> ParseRequest(const Args& args) {
  RETURN_IF_ERROR(args.NoPositionals());
  QuantizeRequest r;
  ASSIGN_OR_RETURN(r.in, args.Required("in"));
  ASSIGN_OR_RETURN(r.out, args.Required("out"));
  r.options.attention_fp8 = !args.Has("no-attention-fp8");
  r.options.overwrite = args.Has("force");
  return r;
}

}  // namespace

int RunQuantize(const std::vector<std::string>& argv) {
  const CommandLine command = {
      .name = "quantize",
      .flags = {{"in", true, "input model directory (F32/BF16/F16 safetensors)"},
                {"out", true, "output directory for the FP8 (compressed-tensors) model"},
                {"no-attention-fp8", false,
                 "keep q/k/v/o_proj in the original dtype (MLP only FP8)"},
                {"force", false, "write into --out even if it is not empty"}},
      .usage = "usage: gecd quantize --in DIR --out DIR [--no-attention-fp8] [--force]\n",
      .usage_on_error = true,
      .error_with_code = true,
  };
  int exit_code = 0;
  std::optional<QuantizeRequest> request =
      ParseCommandLine(command, argv, ParseRequest, &exit_code);
  if (!request.has_value()) return exit_code;

  model::QuantizeOptions& options = request->options;
  std::unique_ptr<ProgressBar> bar;
  options.on_progress = [&bar](size_t done, size_t total, std::string_view module) {
    if (!bar) bar = std::make_unique<ProgressBar>("quantize", total);
    bar->Advance(1, std::string(module));
  };
  const absl::Status status = model::QuantizeCheckpoint(request->in, request->out, options);
  bar.reset();
  if (!status.ok()) {
    std::fprintf(stderr, "gecd quantize: %s\n", status.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "gecd quantize: wrote %s (%s FP8)\n", request->out.c_str(),
               options.attention_fp8 ? "attention and MLP" : "MLP");
  return 0;
}

}  // namespace gecd::cli

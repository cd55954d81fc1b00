#include <cstdio>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "common/args.h"
#include "common/progress_bar.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/quantizer.h"

namespace gecd::cli {
namespace {

using model::Checkpoint;
using model::ModelConfig;

constexpr const char* kModules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                    "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                    "mlp.down_proj"};

std::string WithThousands(long long n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void PrintSummary(const Checkpoint& ckpt) {
  const ModelConfig& c = ckpt.config();
  std::printf("model          %s\n", ckpt.dir().c_str());
  std::printf("architecture   %s (%s)\n", c.architecture_name.c_str(), c.model_type.c_str());
  std::printf("shape          %d layers, hidden %d, intermediate %d, vocab %d\n",
              c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.vocab_size);
  std::printf("attention      %d heads, %d kv heads, head_dim %d%s\n", c.num_attention_heads,
              c.num_key_value_heads, c.head_dim, c.attention_bias ? ", q/k/v bias" : "");
  std::string rope = absl::StrFormat("theta %g", c.rope_theta);
  if (!c.rope_scaling.type.empty()) {
    absl::StrAppendFormat(&rope, ", %s scaling factor %g (original context %d)",
                          c.rope_scaling.type, c.rope_scaling.factor,
                          c.rope_scaling.original_max_position_embeddings);
  }
  std::printf("rope           %s, max positions %d\n", rope.c_str(), c.max_position_embeddings);
  const long long params = model::ParameterCount(c);
  std::printf("parameters     %s (%.2f M)%s\n", WithThousands(params).c_str(), params / 1e6,
              c.tie_word_embeddings ? ", lm_head tied to embeddings" : "");

  std::map<std::string, std::pair<int, long long>> by_dtype;  // count, bytes
  for (const std::string& name : ckpt.TensorNames()) {
    auto t = ckpt.Tensor(name);
    if (!t.ok()) continue;
    auto& [count, bytes] = by_dtype[std::string(model::DTypeName(t->dtype))];
    ++count;
    bytes += static_cast<long long>(t->data.size());
  }
  std::vector<std::string> dtypes;
  for (const auto& [dtype, stat] : by_dtype) {
    dtypes.push_back(
        absl::StrFormat("%s %d tensors (%.1f MiB)", dtype, stat.first, stat.second / 1048576.0));
  }
  std::printf("dtypes         %s\n", absl::StrJoin(dtypes, ", ").c_str());

  if (!c.quantization) {
    std::printf("quantization   none\n");
  } else {
    std::printf(
        "quantization   FP8_DYNAMIC (compressed-tensors): attention q/k/v/o %s, MLP "
        "gate/up/down %s; embeddings, norms and lm_head unquantized\n",
        c.quantization->attention_fp8 ? "FP8" : "not quantized",
        c.quantization->mlp_fp8 ? "FP8" : "not quantized");
  }
}

// A stored FP8 Linear no longer has its original weights, so per-channel error cannot be
// measured; what can be is how much worse one scale per matrix would be on the dequantized
// weights. For float Linears both errors are what quantizing now would give.
absl::Status PrintErrorTable(const Checkpoint& ckpt) {
  const ModelConfig& c = ckpt.config();
  std::printf(
      "\nFP8 (e4m3) weight error, relative Frobenius ||W - dequant(quant(W))|| / ||W||:\n"
      "  float Linears: per-channel (what gecd quantize writes) vs per-tensor, if quantized now\n"
      "  FP8 Linears (*): the original weights are gone, so per-channel error cannot be\n"
      "    measured; per-tensor is the error of requantizing the dequantized weights with\n"
      "    one scale\n");
  std::printf("%6s  %-18s %12s %12s\n", "layer", "module", "per-channel", "per-tensor");
  ProgressBar bar("fp8 error", static_cast<size_t>(c.num_hidden_layers) * std::size(kModules));
  std::vector<std::string> rows;
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (const char* m : kModules) {
      const std::string module = absl::StrCat("model.layers.", layer, ".", m);
      absl::StatusOr<model::LinearWeight> w = ckpt.Linear(module);
      if (!w.ok()) return w.status();
      std::vector<float> values = model::ToFloat(w->weight);
      const size_t rows_n = w->weight.shape[0], cols = w->weight.shape[1];
      if (w->is_fp8()) {
        const std::vector<float> scales = model::ToFloat(*w->scale);
        for (size_t i = 0; i < values.size(); ++i) values[i] *= scales[i / cols];
      }
      const model::Fp8Error e = model::MeasureFp8Error(values, rows_n, cols);
      const std::string per_channel =
          w->is_fp8() ? "stored" : absl::StrFormat("%.3f%%", 100 * e.per_channel);
      rows.push_back(absl::StrFormat("%6d  %-18s %12s %11.3f%%%s", layer, m, per_channel,
                                     100 * e.per_tensor, w->is_fp8() ? " *" : ""));
      bar.Advance(1, module);
    }
  }
  for (const std::string& row : rows) std::printf("%s\n", row.c_str());
  return absl::OkStatus();
}

struct InspectRequest {
  std::string dir;
  bool skip_error = false;
};

absl::StatusOr<InspectRequest> ParseRequest(const Args& args) {
  RETURN_IF_ERROR(args.NoPositionals());
  InspectRequest r;
  ASSIGN_OR_RETURN(r.dir, args.Required("model"));
  r.skip_error = args.Has("skip-error");
  return r;
}

}  // namespace

int RunInspect(const std::vector<std::string>& argv) {
  const CommandLine command = {
      .name = "inspect",
      .flags = {{"model", true, "model directory (config.json + safetensors)"},
                {"skip-error", false, "skip the per-layer FP8 error table (reads every weight)"}},
      .usage = "usage: gecd inspect --model DIR [--skip-error]\n",
      .usage_on_error = true,
      .error_with_code = true,
  };
  int exit_code = 0;
  const std::optional<InspectRequest> request =
      ParseCommandLine(command, argv, ParseRequest, &exit_code);
  if (!request.has_value()) return exit_code;
  auto ckpt = Checkpoint::Open(request->dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "gecd inspect: %s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  PrintSummary(**ckpt);
  if (!request->skip_error) {
    if (const absl::Status s = PrintErrorTable(**ckpt); !s.ok()) {
      std::fprintf(stderr, "gecd inspect: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace gecd::cli

#include "model/quantizer.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/numerics.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/json_fields.h"

namespace gecd::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Files a model directory carries besides config and weights; copied when present.
constexpr const char* kSideFiles[] = {
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
};

// The QuantizationArgs block exactly as compressed-tensors 0.19 serializes it.
json Fp8Args(const char* strategy, bool dynamic, const char* observer) {
  return {{"actorder", nullptr},
          {"block_structure", nullptr},
          {"dynamic", dynamic},
          {"group_size", nullptr},
          {"num_bits", 8},
          {"observer", observer ? json(observer) : json(nullptr)},
          {"observer_kwargs", json::object()},
          {"scale_dtype", nullptr},
          {"strategy", strategy},
          {"symmetric", true},
          {"type", "float"},
          {"zp_dtype", nullptr}};
}

// config.json's quantization_config as llmcompressor 0.14 writes it for FP8_DYNAMIC.
json Fp8DynamicConfig(const std::vector<std::string>& ignore) {
  json group = {{"format", "float-quantized"},
                {"input_activations", Fp8Args("token", /*dynamic=*/true, nullptr)},
                {"output_activations", nullptr},
                {"targets", {"Linear"}},
                {"weights", Fp8Args("channel", /*dynamic=*/false, "memoryless_minmax")}};
  return {{"config_groups", {{"group_0", group}}},
          {"format", "float-quantized"},
          {"global_compression_ratio", nullptr},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"},
          {"sparsity_config", json::object()},
          {"transform_config", json::object()},
          {"version", "0.19.0"}};
}

float RoundTo(DType dtype, float v) {
  switch (dtype) {
    case DType::kBF16:
      return Bf16ToFloat(FloatToBf16(v));
    case DType::kF16:
      return F16ToFloat(FloatToF16(v));
    default:
      return v;
  }
}

// Quantizes one float Linear weight into `writer` as `<module>.weight` + `.weight_scale`.
absl::Status QuantizeLinear(const TensorView& weight, const std::string& module,
                            SafetensorsWriter& writer) {
  const size_t rows = weight.shape[0], cols = weight.shape[1];
  const std::vector<float> w = ToFloat(weight);
  std::vector<uint8_t> codes(rows * cols);
  std::vector<float> scales(rows);
  QuantizeRowsE4m3Codes(w.data(), rows, cols, codes.data(), scales.data());
  if (weight.dtype != DType::kF32) {
    // The scale is stored in the weight's dtype, and the codes are computed against the stored
    // (rounded) scale so code * scale is the representable weight. The quotient is rounded to
    // the weight's dtype before the e4m3 cast, as torch's bf16/f16 division does in
    // llmcompressor: that double rounding moves a code by one step only when the quotient lies
    // within half a bf16 ulp of an e4m3 midpoint, and it makes the codes match llmcompressor's
    // bit for bit.
    for (size_t r = 0; r < rows; ++r) {
      const float stored = RoundTo(weight.dtype, scales[r]);
      if (!(stored > 0.0f) || !std::isfinite(stored)) {
        return absl::OutOfRangeError(
            absl::StrCat(weight.file, ": tensor '", weight.name, "': row ", r, " scale ", scales[r],
                         " is not representable in ", std::string(DTypeName(weight.dtype))));
      }
      scales[r] = stored;
      for (size_t c = 0; c < cols; ++c)
        codes[r * cols + c] = FloatToE4m3(RoundTo(weight.dtype, w[r * cols + c] / stored));
    }
  }
  writer.Add(module + ".weight", DType::kF8E4M3, weight.shape, std::move(codes));
  writer.Add(module + ".weight_scale", weight.dtype, {static_cast<int64_t>(rows), 1},
             FromFloat(scales, weight.dtype));
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir,
                                const QuantizeOptions& options) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(in_dir, out_dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(out_dir, ": the output directory must differ from the input"));
  }
  // Writing into a directory that holds other files could leave a mix of two models.
  if (!options.overwrite && fs::exists(out_dir, ec) && !fs::is_empty(out_dir, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(out_dir, ": exists and is not empty (--force writes into it anyway)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> in, Checkpoint::Open(in_dir));
  const ModelConfig& config = in->config();
  if (config.quantization) {
    return absl::FailedPreconditionError(
        absl::StrCat(in_dir, "/config.json: the model is already quantized"));
  }

  std::set<std::string> quantized;  // module names
  std::vector<std::string> ignore;
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      quantized.insert(p + m);
    }
    for (const char* m :
         {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}) {
      // llmcompressor lists every ignored module by name, in model order, before lm_head.
      if (options.attention_fp8) {
        quantized.insert(p + m);
      } else {
        ignore.push_back(p + m);
      }
    }
  }
  ignore.push_back("lm_head");

  fs::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out_dir, ": ", ec.message()));

  // One output shard per input shard, under the same file name.
  std::map<std::string, std::vector<TensorView>> by_shard;
  for (const std::string& name : in->TensorNames()) {
    ASSIGN_OR_RETURN(TensorView t, in->Tensor(name));
    by_shard[fs::path(t.file).filename().string()].push_back(std::move(t));
  }
  json weight_map = json::object();
  uint64_t total_size = 0;
  size_t done = 0;
  for (const auto& [shard, tensors] : by_shard) {
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    for (const TensorView& t : tensors) {
      const std::string suffix = ".weight";
      const bool is_weight = t.name.ends_with(suffix);
      const std::string module = t.name.substr(0, t.name.size() - (is_weight ? suffix.size() : 0));
      if (is_weight && quantized.contains(module)) {
        RETURN_IF_ERROR(QuantizeLinear(t, module, writer));
        weight_map[module + ".weight_scale"] = shard;
        total_size += t.shape[0] * DTypeSize(t.dtype);
        total_size += t.num_elements();
        if (options.on_progress) options.on_progress(++done, quantized.size(), module);
      } else {
        writer.Add(t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data.begin(), t.data.end()));
        total_size += t.data.size();
      }
      weight_map[t.name] = shard;
    }
    RETURN_IF_ERROR(writer.Write((fs::path(out_dir) / shard).string()));
  }
  if (fs::exists(fs::path(in_dir) / "model.safetensors.index.json", ec)) {
    RETURN_IF_ERROR(
        WriteJsonFile((fs::path(out_dir) / "model.safetensors.index.json").string(),
                      {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}}));
  }

  const std::string config_path = (fs::path(in_dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  ASSIGN_OR_RETURN(json config_json, ParseJson(config_text, config_path));
  config_json["quantization_config"] = Fp8DynamicConfig(ignore);
  RETURN_IF_ERROR(WriteJsonFile((fs::path(out_dir) / "config.json").string(), config_json));

  for (const char* file : kSideFiles) {
    const fs::path from = fs::path(in_dir) / file;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, fs::path(out_dir) / file, fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat(from.string(), ": ", ec.message()));
  }

  // The output must be something gecd itself can run.
  auto reopened = Checkpoint::Open(out_dir);
  if (!reopened.ok()) {
    return absl::InternalError(
        absl::StrCat("quantized checkpoint does not load back: ", reopened.status().ToString()));
  }
  return absl::OkStatus();
}

Fp8Error MeasureFp8Error(std::span<const float> weight, size_t rows, size_t cols) {
  const size_t n = rows * cols;
  double norm = 0.0;
  for (size_t i = 0; i < n; ++i) norm += double{weight[i]} * weight[i];
  Fp8Error error;
  if (norm == 0.0) return error;
  std::vector<float> q(n), scales(rows);
  auto relative = [&](size_t row_len) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = weight[i] - double{q[i]} * scales[i / row_len];
      sum += d * d;
    }
    return std::sqrt(sum / norm);
  };
  QuantizeRowsE4m3(weight.data(), rows, cols, q.data(), scales.data());
  error.per_channel = relative(cols);
  // The whole matrix as a single row is per-tensor quantization.
  QuantizeRowsE4m3(weight.data(), 1, n, q.data(), scales.data());
  error.per_tensor = relative(n);
  return error;
}

}  // namespace gecd::model

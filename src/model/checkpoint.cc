#include "model/checkpoint.h"

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/numerics.h"
#include "common/status_macros.h"
#include "model/json_fields.h"

namespace gecd::model {
namespace {

namespace fs = std::filesystem;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

absl::Status Mismatch(const TensorView& t, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(t.file, ": tensor '", t.name, "': ", std::string(what)));
}

absl::Status ExpectShape(const TensorView& t, const std::vector<int64_t>& shape) {
  if (t.shape == shape) return absl::OkStatus();
  return Mismatch(t,
                  absl::StrCat("shape ", ShapeString(t.shape), ", expected ", ShapeString(shape)));
}

absl::Status ExpectFloat(const TensorView& t) {
  if (IsFloat(t.dtype)) return absl::OkStatus();
  return Mismatch(
      t, absl::StrCat("dtype ", std::string(DTypeName(t.dtype)), ", expected F32, BF16 or F16"));
}

// A shard name from the index must name a file inside the model directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

struct LinearSpec {
  std::string module;
  int64_t out, in;
  bool fp8;  // what config.json's quantization_config says
  bool bias;
};

std::vector<LinearSpec> LinearSpecs(const ModelConfig& c) {
  const bool attn_fp8 = c.quantization && c.quantization->attention_fp8;
  const bool mlp_fp8 = c.quantization && c.quantization->mlp_fp8;
  const int64_t h = c.hidden_size, q = int64_t{c.num_attention_heads} * c.head_dim,
                kv = int64_t{c.num_key_value_heads} * c.head_dim, inter = c.intermediate_size;
  std::vector<LinearSpec> specs;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    specs.push_back({p + "self_attn.q_proj", q, h, attn_fp8, c.attention_bias});
    specs.push_back({p + "self_attn.k_proj", kv, h, attn_fp8, c.attention_bias});
    specs.push_back({p + "self_attn.v_proj", kv, h, attn_fp8, c.attention_bias});
    specs.push_back({p + "self_attn.o_proj", h, q, attn_fp8, false});
    specs.push_back({p + "mlp.gate_proj", inter, h, mlp_fp8, false});
    specs.push_back({p + "mlp.up_proj", inter, h, mlp_fp8, false});
    specs.push_back({p + "mlp.down_proj", h, inter, mlp_fp8, false});
  }
  return specs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  ASSIGN_OR_RETURN(ckpt->config_, ParseModelConfig(config_text, config_path));

  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (fs::exists(gen_path, ec)) {
    ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen_path));
    ASSIGN_OR_RETURN(ckpt->generation_config_, ParseGenerationConfig(gen_text, gen_path));
  }
  // generation_config.json wins where it speaks; config.json fills in what it leaves out.
  GenerationConfig& gen = ckpt->generation_config_;
  if (!gen.bos_token_id) gen.bos_token_id = ckpt->config_.bos_token_id;
  if (gen.eos_token_ids.empty()) gen.eos_token_ids = ckpt->config_.eos_token_ids;

  RETURN_IF_ERROR(ckpt->OpenWeights());
  RETURN_IF_ERROR(ckpt->Validate());
  return ckpt;
}

absl::Status Checkpoint::OpenWeights() {
  const std::string index_path = (fs::path(dir_) / "model.safetensors.index.json").string();
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    const std::string single = (fs::path(dir_) / "model.safetensors").string();
    if (!fs::exists(single, ec)) {
      return absl::NotFoundError(
          absl::StrCat(dir_, ": neither model.safetensors nor model.safetensors.index.json"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single));
    for (const std::string& name : file->TensorNames()) index_[name] = file.get();
    shards_.push_back(std::move(file));
    return absl::OkStatus();
  }

  ASSIGN_OR_RETURN(std::string index_text, ReadFileToString(index_path));
  ASSIGN_OR_RETURN(nlohmann::json index_json, ParseJson(index_text, index_path));
  ASSIGN_OR_RETURN(JsonObject index, JsonObject::Of(index_json, index_path));
  ASSIGN_OR_RETURN(JsonObject weight_map, index.Object("weight_map"));
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const auto& [tensor, file_value] : weight_map.value().items()) {
    if (!file_value.is_string() || !IsPlainFileName(file_value.get<std::string>())) {
      return weight_map.Error(tensor, "expected the file name of a shard in the directory");
    }
    const std::string file = file_value.get<std::string>();
    auto it = by_file.find(file);
    if (it == by_file.end()) {
      const std::string shard_path = (fs::path(dir_) / file).string();
      if (!fs::exists(shard_path, ec)) {
        return weight_map.Error(tensor, absl::StrCat("shard ", file, " does not exist"));
      }
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard, SafetensorsFile::Open(shard_path));
      it = by_file.emplace(file, shard.get()).first;
      shards_.push_back(std::move(shard));
    }
    if (!it->second->Get(tensor).ok()) {
      return weight_map.Error(tensor, absl::StrCat("shard ", file, " does not hold this tensor"));
    }
    index_[tensor] = it->second;
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::Validate() const {
  const ModelConfig& c = config_;
  const int64_t vocab = c.vocab_size, h = c.hidden_size;
  auto plain = [&](const std::string& name, std::vector<int64_t> shape) -> absl::Status {
    ASSIGN_OR_RETURN(TensorView t, Tensor(name));
    RETURN_IF_ERROR(ExpectFloat(t));
    return ExpectShape(t, shape);
  };
  RETURN_IF_ERROR(plain("model.embed_tokens.weight", {vocab, h}));
  RETURN_IF_ERROR(plain("model.norm.weight", {h}));
  if (!c.tie_word_embeddings) RETURN_IF_ERROR(plain("lm_head.weight", {vocab, h}));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    RETURN_IF_ERROR(plain(p + "input_layernorm.weight", {h}));
    RETURN_IF_ERROR(plain(p + "post_attention_layernorm.weight", {h}));
  }
  for (const LinearSpec& spec : LinearSpecs(c)) {
    ASSIGN_OR_RETURN(LinearWeight w, Linear(spec.module));
    RETURN_IF_ERROR(ExpectShape(w.weight, {spec.out, spec.in}));
    if (w.is_fp8() != spec.fp8) {
      return Mismatch(w.weight, spec.fp8
                                    ? absl::StrCat("dtype ", std::string(DTypeName(w.weight.dtype)),
                                                   ", but config.json's quantization_config "
                                                   "makes this Linear F8_E4M3")
                                    : "is F8_E4M3, but config.json's quantization_config "
                                      "does not quantize this Linear");
    }
    if (w.is_fp8()) {
      RETURN_IF_ERROR(ExpectFloat(*w.scale));
      RETURN_IF_ERROR(ExpectShape(*w.scale, {spec.out, 1}));
    }
    if (spec.bias) {
      if (!w.bias) {
        return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", spec.module,
                                                ".bias' (attention_bias is set)"));
      }
      RETURN_IF_ERROR(ExpectFloat(*w.bias));
      RETURN_IF_ERROR(ExpectShape(*w.bias, {spec.out}));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, shard] : index_) names.push_back(name);
  return names;
}

absl::StatusOr<TensorView> Checkpoint::Tensor(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", std::string(name), "'"));
  }
  return it->second->Get(name);
}

absl::StatusOr<LinearWeight> Checkpoint::Linear(std::string_view module) const {
  const std::string m(module);
  LinearWeight w;
  ASSIGN_OR_RETURN(w.weight, Tensor(m + ".weight"));
  if (w.weight.shape.size() != 2) {
    return Mismatch(w.weight,
                    absl::StrCat("shape ", ShapeString(w.weight.shape), ", expected [out, in]"));
  }
  if (w.weight.dtype == DType::kF8E4M3) {
    auto scale = Tensor(m + ".weight_scale");
    if (!scale.ok()) {
      return absl::NotFoundError(absl::StrCat(w.weight.file, ": tensor '", w.weight.name,
                                              "' is F8_E4M3 but '", m,
                                              ".weight_scale' is missing"));
    }
    w.scale = *std::move(scale);
  } else {
    RETURN_IF_ERROR(ExpectFloat(w.weight));
  }
  if (index_.contains(m + ".bias")) {
    ASSIGN_OR_RETURN(w.bias, Tensor(m + ".bias"));
  }
  return w;
}

absl::StatusOr<std::vector<float>> Checkpoint::FloatTensor(std::string_view name,
                                                           int64_t elements) const {
  ASSIGN_OR_RETURN(TensorView view, Tensor(name));
  std::vector<float> v = ToFloat(view);
  if (static_cast<int64_t>(v.size()) != elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(name), ": expected ", elements, " elements, got ", v.size()));
  }
  return v;
}

std::vector<float> ToFloat(const TensorView& tensor) {
  const size_t n = tensor.data.size() / DTypeSize(tensor.dtype);
  std::vector<float> out(n);
  switch (tensor.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), tensor.data.data(), n * sizeof(float));
      break;
    case DType::kBF16:
    case DType::kF16: {
      // The mapping gives no alignment guarantee for 16-bit data; copy before reinterpreting.
      std::vector<uint16_t> raw(n);
      std::memcpy(raw.data(), tensor.data.data(), n * sizeof(uint16_t));
      if (tensor.dtype == DType::kBF16) {
        Bf16ToFloat(raw, out.data());
      } else {
        F16ToFloat(raw, out.data());
      }
      break;
    }
    case DType::kF8E4M3:
      E4m3ToFloat(tensor.data, out.data());
      break;
  }
  return out;
}

std::vector<uint8_t> FromFloat(std::span<const float> values, DType dtype) {
  std::vector<uint8_t> out(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF32:
        std::memcpy(&out[i * 4], &values[i], 4);
        break;
      case DType::kBF16:
      case DType::kF16: {
        const uint16_t v = dtype == DType::kBF16 ? FloatToBf16(values[i]) : FloatToF16(values[i]);
        out[i * 2] = static_cast<uint8_t>(v);
        out[i * 2 + 1] = static_cast<uint8_t>(v >> 8);
        break;
      }
      case DType::kF8E4M3:
        out[i] = FloatToE4m3(values[i]);
        break;
    }
  }
  return out;
}

}  // namespace gecd::model

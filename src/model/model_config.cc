#include "model/model_config.h"

#include <cmath>
#include <memory>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/json_fields.h"

namespace gecd::model {
namespace {

using nlohmann::json;

// Bounds that keep every size product in ParameterCount and the tensor checks inside int64.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

struct ArchitectureInfo {
  const char* class_name;
  const char* model_type;
  Architecture architecture;
};
constexpr ArchitectureInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama", Architecture::kLlama},
    {"Qwen2ForCausalLM", "qwen2", Architecture::kQwen2},
    {"MistralForCausalLM", "mistral", Architecture::kMistral},
};

absl::Status ParseArchitecture(const JsonObject& obj, ModelConfig& config) {
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, obj.OptionalString("model_type"));
  std::optional<std::string> class_name;
  if (const json* list = obj.Find("architectures")) {
    if (!list->is_array() || list->size() != 1 || !(*list)[0].is_string()) {
      return obj.Error("architectures", "expected a list of one class name");
    }
    class_name = (*list)[0].get<std::string>();
  }
  if (!class_name && !model_type) {
    return obj.Error("architectures", "missing (and no model_type either)");
  }
  for (const ArchitectureInfo& info : kArchitectures) {
    if (class_name ? *class_name == info.class_name : *model_type == info.model_type) {
      config.architecture = info.architecture;
      config.architecture_name = info.class_name;
      config.model_type = model_type.value_or(info.model_type);
      return absl::OkStatus();
    }
  }
  return class_name
             ? obj.Error("architectures", absl::StrCat("unsupported architecture '", *class_name,
                                                       "' (supported: LlamaForCausalLM, "
                                                       "Qwen2ForCausalLM, MistralForCausalLM)"))
             : obj.Error("model_type", absl::StrCat("unsupported model_type '", *model_type, "'"));
}

// An int, a list of ints, or null (HF writes eos_token_id all three ways).
absl::StatusOr<std::vector<int>> TokenIds(const JsonObject& obj, std::string_view key) {
  std::vector<int> ids;
  const json* v = obj.Find(key);
  if (v == nullptr) return ids;
  if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      ASSIGN_OR_RETURN(int64_t id, JsonToInt((*v)[i], 0, kMaxTokenId, obj.path(),
                                             absl::StrCat(obj.Label(key), "[", i, "]")));
      ids.push_back(static_cast<int>(id));
    }
    return ids;
  }
  ASSIGN_OR_RETURN(int64_t id, JsonToInt(*v, 0, kMaxTokenId, obj.path(), obj.Label(key)));
  ids.push_back(static_cast<int>(id));
  return ids;
}

absl::StatusOr<std::optional<int>> OptionalTokenId(const JsonObject& obj, std::string_view key) {
  ASSIGN_OR_RETURN(std::optional<int64_t> id, obj.OptionalInt(key, 0, kMaxTokenId));
  if (!id) return std::nullopt;
  return static_cast<int>(*id);
}

absl::StatusOr<float> PositiveFloat(const JsonObject& obj, std::string_view key, float fallback) {
  ASSIGN_OR_RETURN(std::optional<double> v, obj.OptionalNumber(key));
  if (!v) return fallback;
  if (!std::isfinite(*v) || *v <= 0.0 || *v > 3.0e38) {
    return obj.Error(key, absl::StrCat("must be a positive finite number, got ", *v));
  }
  return static_cast<float>(*v);
}

// rope_scaling (transformers 4) and rope_parameters (transformers 5) share this shape; the
// latter also carries rope_theta.
absl::Status ParseRope(const JsonObject& top, ModelConfig& config) {
  ASSIGN_OR_RETURN(config.rope_theta, PositiveFloat(top, "rope_theta", 10000.0f));
  const char* key = top.Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!top.Has(key)) return absl::OkStatus();
  ASSIGN_OR_RETURN(JsonObject rope, top.Object(key));
  ASSIGN_OR_RETURN(config.rope_theta, PositiveFloat(rope, "rope_theta", config.rope_theta));
  const char* type_key = rope.Has("rope_type") ? "rope_type" : "type";
  ASSIGN_OR_RETURN(std::optional<std::string> type, rope.OptionalString(type_key));
  if (!type || *type == "default") return absl::OkStatus();
  if (*type != "llama3") {
    return rope.Error(type_key, absl::StrCat("unsupported RoPE scaling '", *type,
                                             "' (supported: default, llama3)"));
  }
  RopeScaling& s = config.rope_scaling;
  s.type = *type;
  ASSIGN_OR_RETURN(s.factor, PositiveFloat(rope, "factor", s.factor));
  ASSIGN_OR_RETURN(s.low_freq_factor, PositiveFloat(rope, "low_freq_factor", s.low_freq_factor));
  ASSIGN_OR_RETURN(s.high_freq_factor, PositiveFloat(rope, "high_freq_factor", s.high_freq_factor));
  ASSIGN_OR_RETURN(std::optional<int64_t> original,
                   rope.OptionalInt("original_max_position_embeddings", 1, kMaxDim));
  if (original) s.original_max_position_embeddings = static_cast<int>(*original);
  // The llama3 interpolation divides by (high - low).
  if (s.high_freq_factor <= s.low_freq_factor) {
    return rope.Error("high_freq_factor", "must be greater than low_freq_factor");
  }
  return absl::OkStatus();
}

// A compressed-tensors QuantizationArgs block must be exactly FP8_DYNAMIC's.
absl::Status ExpectFp8Args(const JsonObject& group, std::string_view key, std::string_view strategy,
                           bool dynamic) {
  ASSIGN_OR_RETURN(JsonObject args, group.Object(key));
  ASSIGN_OR_RETURN(int64_t bits, args.Int("num_bits", 0, 64));
  if (bits != 8) return args.Error("num_bits", absl::StrCat("expected 8, got ", bits));
  ASSIGN_OR_RETURN(std::string type, args.String("type"));
  if (type != "float")
    return args.Error("type", absl::StrCat("expected \"float\", got \"", type, "\""));
  ASSIGN_OR_RETURN(std::string got_strategy, args.String("strategy"));
  if (got_strategy != strategy) {
    return args.Error("strategy", absl::StrCat("expected \"", std::string(strategy), "\", got \"",
                                               got_strategy, "\""));
  }
  ASSIGN_OR_RETURN(std::optional<bool> symmetric, args.OptionalBool("symmetric"));
  if (symmetric != true) return args.Error("symmetric", "expected true");
  const json* got_dynamic = args.Find("dynamic");
  if (got_dynamic == nullptr || !got_dynamic->is_boolean() || got_dynamic->get<bool>() != dynamic) {
    return args.Error("dynamic", dynamic ? "expected true" : "expected false");
  }
  for (const char* unsupported : {"group_size", "block_structure"}) {
    if (args.Has(unsupported)) return args.Error(unsupported, "must be null for FP8_DYNAMIC");
  }
  if (const json* actorder = args.Find("actorder");
      actorder != nullptr && !(actorder->is_boolean() && !actorder->get<bool>())) {
    return args.Error("actorder", "must be null for FP8_DYNAMIC");
  }
  return absl::OkStatus();
}

absl::Status ExpectFloatQuantized(const JsonObject& obj, std::string_view key) {
  ASSIGN_OR_RETURN(std::string format, obj.String(key));
  if (format != "float-quantized") {
    return obj.Error(
        key, absl::StrCat("unsupported format \"", format, "\" (supported: float-quantized)"));
  }
  return absl::OkStatus();
}

// An `ignore` entry: an exact module name, or "re:" + a pattern matched at the start of the name
// (Python's re.match, as compressed-tensors does). PCRE2 is close to Python's syntax and, with a
// match limit, cannot be driven into catastrophic backtracking by a hostile config.
class IgnoreMatcher {
 public:
  static absl::StatusOr<IgnoreMatcher> Create(const std::vector<std::string>& entries,
                                              const JsonObject& quant) {
    IgnoreMatcher m;
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string& e = entries[i];
      if (e.rfind("re:", 0) != 0) {
        m.names_.push_back(e);
        continue;
      }
      int error = 0;
      PCRE2_SIZE offset = 0;
      pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(e.data() + 3), e.size() - 3,
                                       PCRE2_ANCHORED | PCRE2_UTF, &error, &offset, nullptr);
      if (code == nullptr) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof(message));
        return quant.Error(absl::StrCat("ignore[", i, "]"),
                           absl::StrCat("bad regular expression at offset ", offset, ": ",
                                        reinterpret_cast<const char*>(message)));
      }
      m.patterns_.emplace_back(code);
    }
    m.match_context_.reset(pcre2_match_context_create(nullptr));
    pcre2_set_match_limit(m.match_context_.get(), 100000);
    return m;
  }

  bool Matches(const std::string& module) const {
    for (const std::string& n : names_) {
      if (n == module) return true;
    }
    for (const auto& code : patterns_) {
      std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
          pcre2_match_data_create_from_pattern(code.get(), nullptr));
      const int rc = pcre2_match(code.get(), reinterpret_cast<PCRE2_SPTR>(module.data()),
                                 module.size(), 0, 0, data.get(), match_context_.get());
      if (rc >= 0) return true;
    }
    return false;
  }

 private:
  struct CodeDeleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  struct MatchDataDeleter {
    void operator()(pcre2_match_data* d) const { pcre2_match_data_free(d); }
  };
  struct ContextDeleter {
    void operator()(pcre2_match_context* c) const { pcre2_match_context_free(c); }
  };
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<pcre2_code, CodeDeleter>> patterns_;
  std::unique_ptr<pcre2_match_context, ContextDeleter> match_context_;
};

// True when every module of the family is quantized, false when none is; a checkpoint that
// quantizes only some layers' attention (or MLP) is not one the engine can run.
absl::StatusOr<bool> FamilyQuantized(const IgnoreMatcher& matcher, int layers,
                                     std::initializer_list<const char*> modules,
                                     std::string_view family, const JsonObject& quant) {
  int ignored = 0, total = 0;
  for (int i = 0; i < layers; ++i) {
    for (const char* m : modules) {
      ignored += matcher.Matches(absl::StrCat("model.layers.", i, ".", m)) ? 1 : 0;
      ++total;
    }
  }
  if (ignored != 0 && ignored != total) {
    return quant.Error(
        "ignore", absl::StrCat("ignores ", ignored, " of the ", total, " ", std::string(family),
                               " projections; gecd supports all or none"));
  }
  return ignored == 0;
}

absl::StatusOr<std::optional<QuantizationConfig>> ParseQuantization(const JsonObject& top,
                                                                    int layers) {
  if (!top.Has("quantization_config")) return std::nullopt;
  ASSIGN_OR_RETURN(JsonObject quant, top.Object("quantization_config"));
  ASSIGN_OR_RETURN(std::string method, quant.String("quant_method"));
  if (method != "compressed-tensors") {
    return quant.Error("quant_method", absl::StrCat("unsupported \"", method,
                                                    "\" (supported: compressed-tensors)"));
  }
  if (quant.Has("format")) RETURN_IF_ERROR(ExpectFloatQuantized(quant, "format"));
  if (quant.Has("kv_cache_scheme")) return quant.Error("kv_cache_scheme", "is not supported");
  for (const char* empty : {"sparsity_config", "transform_config"}) {
    if (const json* v = quant.Find(empty); v != nullptr && !v->empty()) {
      return quant.Error(empty, "is not supported");
    }
  }
  ASSIGN_OR_RETURN(JsonObject groups, quant.Object("config_groups"));
  if (groups.value().size() != 1) {
    return quant.Error("config_groups", "expected exactly one group (FP8_DYNAMIC on Linear)");
  }
  const std::string group_name = groups.value().begin().key();
  ASSIGN_OR_RETURN(JsonObject group, groups.Object(group_name));
  if (group.Has("format")) {
    RETURN_IF_ERROR(ExpectFloatQuantized(group, "format"));
  } else if (!quant.Has("format")) {
    return quant.Error("format", "missing");
  }
  const json* targets = group.Find("targets");
  if (targets == nullptr || *targets != json::array({"Linear"})) {
    return group.Error("targets", "expected [\"Linear\"]");
  }
  RETURN_IF_ERROR(ExpectFp8Args(group, "weights", "channel", /*dynamic=*/false));
  RETURN_IF_ERROR(ExpectFp8Args(group, "input_activations", "token", /*dynamic=*/true));
  if (group.Has("output_activations")) {
    return group.Error("output_activations", "must be null for FP8_DYNAMIC");
  }

  QuantizationConfig q;
  if (const json* ignore = quant.Find("ignore")) {
    if (!ignore->is_array()) return quant.Error("ignore", "expected a list of module names");
    for (size_t i = 0; i < ignore->size(); ++i) {
      if (!(*ignore)[i].is_string()) {
        return quant.Error(absl::StrCat("ignore[", i, "]"), "expected a string");
      }
      q.ignore.push_back((*ignore)[i].get<std::string>());
    }
  }
  ASSIGN_OR_RETURN(IgnoreMatcher matcher, IgnoreMatcher::Create(q.ignore, quant));
  if (!matcher.Matches("lm_head")) {
    return quant.Error("ignore", "must list lm_head (gecd keeps lm_head unquantized)");
  }
  ASSIGN_OR_RETURN(q.attention_fp8, FamilyQuantized(matcher, layers,
                                                    {"self_attn.q_proj", "self_attn.k_proj",
                                                     "self_attn.v_proj", "self_attn.o_proj"},
                                                    "attention", quant));
  ASSIGN_OR_RETURN(
      q.mlp_fp8, FamilyQuantized(matcher, layers, {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"},
                                 "MLP", quant));
  return q;
}

absl::StatusOr<ModelConfig> ParseModelConfigObject(const JsonObject& obj) {
  ModelConfig c;
  RETURN_IF_ERROR(ParseArchitecture(obj, c));
  auto dim = [&](std::string_view key, int& out) -> absl::Status {
    ASSIGN_OR_RETURN(int64_t v, obj.Int(key, 1, kMaxDim));
    out = static_cast<int>(v);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(dim("vocab_size", c.vocab_size));
  RETURN_IF_ERROR(dim("hidden_size", c.hidden_size));
  RETURN_IF_ERROR(dim("intermediate_size", c.intermediate_size));
  RETURN_IF_ERROR(dim("num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(int64_t layers, obj.Int("num_hidden_layers", 1, kMaxLayers));
  c.num_hidden_layers = static_cast<int>(layers);
  ASSIGN_OR_RETURN(std::optional<int64_t> kv, obj.OptionalInt("num_key_value_heads", 1, kMaxDim));
  c.num_key_value_heads = static_cast<int>(kv.value_or(c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return obj.Error("num_key_value_heads",
                     absl::StrCat(c.num_key_value_heads, " does not divide num_attention_heads ",
                                  c.num_attention_heads));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, obj.OptionalInt("head_dim", 1, kMaxDim));
  if (head_dim) {
    c.head_dim = static_cast<int>(*head_dim);
  } else if (c.hidden_size % c.num_attention_heads != 0) {
    return obj.Error("num_attention_heads",
                     absl::StrCat(c.num_attention_heads, " does not divide hidden_size ",
                                  c.hidden_size, " and head_dim is not given"));
  } else {
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    return obj.Error("head_dim", absl::StrCat("must be even for RoPE, got ", c.head_dim));
  }
  if (int64_t{c.head_dim} * c.num_attention_heads > kMaxDim) {
    return obj.Error("head_dim", "times num_attention_heads is too large");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_pos,
                   obj.OptionalInt("max_position_embeddings", 1, kMaxDim));
  c.max_position_embeddings = static_cast<int>(max_pos.value_or(2048));
  ASSIGN_OR_RETURN(c.rms_norm_eps, PositiveFloat(obj, "rms_norm_eps", c.rms_norm_eps));
  RETURN_IF_ERROR(ParseRope(obj, c));
  ASSIGN_OR_RETURN(std::optional<bool> tie, obj.OptionalBool("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> bias, obj.OptionalBool("attention_bias"));
  // Qwen2's q/k/v projections always carry a bias; its config has no switch for it.
  c.attention_bias = c.architecture == Architecture::kQwen2 || bias.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> mlp_bias, obj.OptionalBool("mlp_bias"));
  if (mlp_bias == true) return obj.Error("mlp_bias", "MLP biases are not supported");
  ASSIGN_OR_RETURN(std::optional<std::string> act, obj.OptionalString("hidden_act"));
  if (act && *act != "silu") {
    return obj.Error("hidden_act",
                     absl::StrCat("unsupported activation \"", *act, "\" (supported: silu)"));
  }
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  const char* dtype_key = obj.Has("dtype") ? "dtype" : "torch_dtype";
  ASSIGN_OR_RETURN(std::optional<std::string> dtype, obj.OptionalString(dtype_key));
  if (dtype) {
    if (*dtype != "float32" && *dtype != "bfloat16" && *dtype != "float16") {
      return obj.Error(dtype_key, absl::StrCat("unsupported dtype \"", *dtype,
                                               "\" (supported: float32, bfloat16, float16)"));
    }
    c.torch_dtype = *dtype;
  }
  ASSIGN_OR_RETURN(c.bos_token_id, OptionalTokenId(obj, "bos_token_id"));
  ASSIGN_OR_RETURN(c.eos_token_ids, TokenIds(obj, "eos_token_id"));
  ASSIGN_OR_RETURN(c.quantization, ParseQuantization(obj, c.num_hidden_layers));
  return c;
}

absl::StatusOr<GenerationConfig> ParseGenerationConfigObject(const JsonObject& obj) {
  GenerationConfig g;
  ASSIGN_OR_RETURN(g.bos_token_id, OptionalTokenId(obj, "bos_token_id"));
  ASSIGN_OR_RETURN(g.eos_token_ids, TokenIds(obj, "eos_token_id"));
  ASSIGN_OR_RETURN(std::optional<int64_t> max_new, obj.OptionalInt("max_new_tokens", 1, kMaxDim));
  if (max_new) g.max_new_tokens = static_cast<int>(*max_new);
  return g;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view path) {
  ASSIGN_OR_RETURN(json value, ParseJson(json_text, path));
  ASSIGN_OR_RETURN(JsonObject obj, JsonObject::Of(value, path));
  // The accessors check types before reading, so nothing below should throw; the catch is the
  // boundary that guarantees it.
  try {
    return ParseModelConfigObject(obj);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ", e.what()));
  }
}

absl::StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json_text,
                                                       std::string_view path) {
  ASSIGN_OR_RETURN(json value, ParseJson(json_text, path));
  ASSIGN_OR_RETURN(JsonObject obj, JsonObject::Of(value, path));
  try {
    return ParseGenerationConfigObject(obj);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ", e.what()));
  }
}

long long ParameterCount(const ModelConfig& c) {
  const long long hidden = c.hidden_size, q_dim = 1LL * c.num_attention_heads * c.head_dim,
                  kv_dim = 1LL * c.num_key_value_heads * c.head_dim;
  const long long embed = 1LL * c.vocab_size * hidden;
  long long layer = hidden * q_dim + 2 * hidden * kv_dim + q_dim * hidden  // q, k, v, o
                    + 3 * hidden * c.intermediate_size                     // gate, up, down
                    + 2 * hidden;                                          // two norms
  if (c.attention_bias) layer += q_dim + 2 * kv_dim;
  return embed + c.num_hidden_layers * layer + hidden + (c.tie_word_embeddings ? 0 : embed);
}

}  // namespace gecd::model

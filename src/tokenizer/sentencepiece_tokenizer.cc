#include "tokenizer/sentencepiece_tokenizer.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "tokenizer/joined_pieces.h"
#include "tokenizer/sentencepiece_shim/shim.h"
#include "tokenizer/utf8.h"

namespace gecd::model {

namespace {

// AddressSanitizer does not support RTLD_DEEPBIND (its runtime refuses such a dlopen, since the
// library would bypass its malloc interceptors), so sanitizer builds load the shim without it.
// There SentencePiece's protobuf-lite binds to gRPC's libprotobuf where that is loaded, whose
// version check then refuses every tokenizer.model: only binaries without the daemon (the
// tokenizer tests) can read one.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDeepBind = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kDeepBind = 0;
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif

constexpr char kShimEnv[] = "GECD_SENTENCEPIECE_SHIM";

struct DlcloseDeleter {
  void operator()(void* handle) const { dlclose(handle); }
};

// Where the shim may be: $GECD_SENTENCEPIECE_SHIM alone when set; otherwise beside the
// executable (build/gecd), in an install's lib/gecd (bin/../lib/gecd), and in the executable's
// parent directory (build/tests/.., build/bench/..).
absl::StatusOr<std::vector<std::filesystem::path>> ShimCandidates() {
  if (const char* env = std::getenv(kShimEnv); env != nullptr && *env != '\0') {
    return std::vector<std::filesystem::path>{env};
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot find the SentencePiece shim: /proc/self/exe: ", ec.message(), "; set ", kShimEnv));
  }
  const std::filesystem::path dir = exe.parent_path();
  return std::vector<std::filesystem::path>{
      dir / GECD_SENTENCEPIECE_SHIM_NAME,
      dir.parent_path() / "lib" / "gecd" / GECD_SENTENCEPIECE_SHIM_NAME,
      dir.parent_path() / GECD_SENTENCEPIECE_SHIM_NAME};
}

template <typename Fn>
absl::Status Resolve(void* handle, const std::string& path, const char* name, Fn* fn) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a gecd SentencePiece shim (no ", name, ")"));
  }
  *fn = reinterpret_cast<Fn>(symbol);
  return absl::OkStatus();
}

}  // namespace

// The shim's C ABI (tokenizer/sentencepiece_shim/shim.h), resolved once per process.
class SentencePieceShim {
 public:
  // Loaded on first use and never unloaded: tokenizers may be used until the process exits.
  static absl::StatusOr<const SentencePieceShim*> Get() {
    static const auto* const shim =
        new absl::StatusOr<std::unique_ptr<const SentencePieceShim>>(Load());
    if (!shim->ok()) return shim->status();
    return shim->value().get();
  }

  decltype(&gecd_sp_load) load = nullptr;
  decltype(&gecd_sp_destroy) destroy = nullptr;
  decltype(&gecd_sp_encode) encode = nullptr;
  decltype(&gecd_sp_decode) decode = nullptr;
  decltype(&gecd_sp_vocab_size) vocab_size = nullptr;
  decltype(&gecd_sp_id_to_piece) id_to_piece = nullptr;
  decltype(&gecd_sp_piece_to_id) piece_to_id = nullptr;
  decltype(&gecd_sp_is_control) is_control = nullptr;
  decltype(&gecd_sp_is_unknown) is_unknown = nullptr;
  decltype(&gecd_sp_is_byte) is_byte = nullptr;
  decltype(&gecd_sp_is_unused) is_unused = nullptr;
  decltype(&gecd_sp_is_user_defined) is_user_defined = nullptr;
  decltype(&gecd_sp_free) free = nullptr;

 private:
  explicit SentencePieceShim(void* handle) : handle_(handle) {}

  static absl::StatusOr<std::unique_ptr<const SentencePieceShim>> Load() {
    ASSIGN_OR_RETURN(const std::vector<std::filesystem::path> candidates, ShimCandidates());
    std::vector<std::string> tried;
    for (const std::filesystem::path& candidate : candidates) {
      const std::string path = candidate.string();
      std::error_code ec;
      if (!std::filesystem::exists(candidate, ec)) {
        tried.push_back(path);
        continue;
      }
      // RTLD_LOCAL keeps libsentencepiece's protobuf-lite 3.14 out of the global namespace
      // (where it would capture gRPC's libprotobuf); RTLD_DEEPBIND makes the shim and
      // libsentencepiece bind their own symbols first, so SentencePiece uses the protobuf it
      // embeds even when libprotobuf is already loaded. ASan does not support RTLD_DEEPBIND: see
      // kDeepBind.
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kDeepBind);
      if (handle == nullptr) {
        const char* error = dlerror();
        return absl::FailedPreconditionError(
            absl::StrCat("cannot load the SentencePiece shim: ", error ? error : path));
      }
      auto shim = absl::WrapUnique(new SentencePieceShim(handle));
      RETURN_IF_ERROR(shim->ResolveAll(path));
      return shim;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("SentencePiece shim ", GECD_SENTENCEPIECE_SHIM_NAME, " not found; tried ",
                     absl::StrJoin(tried, ", "), " (", kShimEnv, " names it explicitly)"));
  }

  absl::Status ResolveAll(const std::string& path) {
    void* handle = handle_.get();
    decltype(&gecd_sp_abi_version) abi_version = nullptr;
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_abi_version", &abi_version));
    if (const int version = abi_version(); version != GECD_SP_ABI_VERSION) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": SentencePiece shim ABI version ",
                                                        version, ", this gecd needs ",
                                                        GECD_SP_ABI_VERSION));
    }
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_load", &load));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_destroy", &destroy));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_encode", &encode));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_decode", &decode));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_vocab_size", &vocab_size));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_id_to_piece", &id_to_piece));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_piece_to_id", &piece_to_id));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_is_control", &is_control));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_is_unknown", &is_unknown));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_is_byte", &is_byte));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_is_unused", &is_unused));
    RETURN_IF_ERROR(Resolve(handle, path, "gecd_sp_is_user_defined", &is_user_defined));
    return Resolve(handle, path, "gecd_sp_free", &free);
  }

  std::unique_ptr<void, DlcloseDeleter> handle_;
};

// One loaded tokenizer.model inside the shim.
class SentencePieceModel {
 public:
  static absl::StatusOr<std::unique_ptr<const SentencePieceModel>> Load(const std::string& path) {
    absl::StatusOr<const SentencePieceShim*> shim_or = SentencePieceShim::Get();
    if (!shim_or.ok()) {
      return absl::Status(shim_or.status().code(),
                          absl::StrCat(path, ": ", shim_or.status().message()));
    }
    const SentencePieceShim* shim = *shim_or;
    GecdSpProcessor* processor = nullptr;
    char* error = nullptr;
    const int code = shim->load(path.c_str(), &processor, &error);
    RETURN_IF_ERROR(Check(shim, code, error, path));
    return absl::WrapUnique(new SentencePieceModel(shim, processor));
  }

  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;
  ~SentencePieceModel() { shim_->destroy(processor_); }

  // Appends the ids of text and, when `spans` is not null, the [begin, end) byte offsets in
  // `text` each was read from.
  absl::Status Encode(std::string_view text, std::vector<int32_t>* ids,
                      std::vector<std::pair<uint32_t, uint32_t>>* spans = nullptr) const {
    int32_t* encoded = nullptr;
    uint32_t* offsets = nullptr;
    size_t count = 0;
    char* error = nullptr;
    const int code = shim_->encode(processor_, text.data(), text.size(), &encoded,
                                   spans != nullptr ? &offsets : nullptr, &count, &error);
    RETURN_IF_ERROR(Check(shim_, code, error, "SentencePiece encode"));
    const ShimBuffer owned_ids(encoded, {shim_});
    const ShimBuffer owned_offsets(offsets, {shim_});
    ids->insert(ids->end(), encoded, encoded + count);
    if (spans != nullptr) {
      for (size_t i = 0; i < count; ++i) spans->emplace_back(offsets[2 * i], offsets[2 * i + 1]);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const {
    char* text = nullptr;
    size_t size = 0;
    char* error = nullptr;
    const int code = shim_->decode(processor_, ids.data(), ids.size(), &text, &size, &error);
    RETURN_IF_ERROR(Check(shim_, code, error, "SentencePiece decode"));
    const ShimBuffer owned(text, {shim_});
    return std::string(text, size);
  }

  int32_t vocab_size() const { return shim_->vocab_size(processor_); }
  std::string_view IdToPiece(int32_t id) const {
    size_t size = 0;
    const char* piece = shim_->id_to_piece(processor_, id, &size);
    return std::string_view(piece, size);
  }
  std::optional<int32_t> PieceToId(std::string_view piece) const {
    const int32_t id = shim_->piece_to_id(processor_, piece.data(), piece.size());
    if (id < 0) return std::nullopt;
    return id;
  }
  bool IsControl(int32_t id) const { return shim_->is_control(processor_, id) != 0; }
  bool IsUnknown(int32_t id) const { return shim_->is_unknown(processor_, id) != 0; }
  bool IsByte(int32_t id) const { return shim_->is_byte(processor_, id) != 0; }
  bool IsUnused(int32_t id) const { return shim_->is_unused(processor_, id) != 0; }
  bool IsUserDefined(int32_t id) const { return shim_->is_user_defined(processor_, id) != 0; }

 private:
  // A buffer the shim malloc'ed, which only the shim may free.
  struct ShimFree {
    const SentencePieceShim* shim;
    void operator()(void* buffer) const { shim->free(buffer); }
  };
  using ShimBuffer = std::unique_ptr<void, ShimFree>;

  SentencePieceModel(const SentencePieceShim* shim, GecdSpProcessor* processor)
      : shim_(shim), processor_(processor) {}

  // The shim's status code (absl's numbering) and message as a Status prefixed by context.
  static absl::Status Check(const SentencePieceShim* shim, int code, char* error,
                            std::string_view context) {
    if (code == 0) return absl::OkStatus();
    const ShimBuffer owned(error, {shim});
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat(std::string(context), ": ", error ? error : "out of memory"));
  }

  const SentencePieceShim* shim_;
  GecdSpProcessor* processor_;  // owned; freed through the shim
};

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Parses a byte-fallback piece "<0xNN>".
std::optional<char> BytePieceValue(std::string_view piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return std::nullopt;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                               : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<char>(value);
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<const SentencePieceModel> sp)
    : sp_(std::move(sp)) {
  for (int32_t id = 0; id < sp_->vocab_size(); ++id) {
    if (sp_->IsControl(id) || sp_->IsUnknown(id)) {
      specials_.emplace_back(std::string(sp_->IdToPiece(id)), id);
    }
    if (sp_->IsUnknown(id)) unk_id_ = id;
    has_user_defined_ = has_user_defined_ || sp_->IsUserDefined(id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::LoadFromFile(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<const SentencePieceModel> sp, SentencePieceModel::Load(path));
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

absl::Status SentencePieceTokenizer::EncodeRun(const JoinedPieces& joined, size_t begin, size_t end,
                                               std::vector<int32_t>* ids) const {
  const std::string_view run = joined.text().substr(begin, end - begin);
  if (!has_user_defined_ || joined.AllowsTokenAt(begin, end)) return sp_->Encode(run, ids);
  std::vector<int32_t> encoded;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  RETURN_IF_ERROR(sp_->Encode(run, &encoded, &spans));
  for (size_t i = 0; i < encoded.size(); ++i) {
    const auto [b, e] = spans[i];
    if (sp_->IsUserDefined(encoded[i]) && !joined.AllowsTokenAt(begin + b, begin + e)) {
      SpellOut(run.substr(b, e - b), ids);
    } else {
      ids->push_back(encoded[i]);
    }
  }
  return absl::OkStatus();
}

void SentencePieceTokenizer::SpellOut(std::string_view text, std::vector<int32_t>* ids) const {
  const auto is_plain = [&](int32_t id) {
    return !IsSpecial(id) && !sp_->IsUserDefined(id) && !sp_->IsByte(id) && !sp_->IsUnused(id);
  };
  for (size_t i = 0; i < text.size();) {
    const size_t n =
        std::min(Utf8SequenceLength(static_cast<unsigned char>(text[i])), text.size() - i);
    const std::string_view character = text.substr(i, n);
    i += n;
    const std::optional<int32_t> id = sp_->PieceToId(character == " " ? kSpace : character);
    if (id.has_value() && is_plain(*id)) {
      ids->push_back(*id);
      continue;
    }
    for (unsigned char byte : character) {
      const std::optional<int32_t> byte_id = sp_->PieceToId(absl::StrFormat("<0x%02X>", byte));
      if (byte_id.has_value() && sp_->IsByte(*byte_id)) {
        ids->push_back(*byte_id);
      } else if (unk_id_.has_value()) {
        // As SentencePiece itself encodes a character it cannot spell.
        ids->push_back(*unk_id_);
        break;
      }
    }
  }
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodePieces(
    std::span<const TextPiece> pieces) const {
  ASSIGN_OR_RETURN(const JoinedPieces joined, JoinedPieces::Join(pieces));
  const std::string_view text = joined.text();
  std::vector<int32_t> ids;
  size_t gap = 0;  // start of the text not yet encoded
  for (const JoinedPieces::Piece& piece : joined.pieces()) {
    if (!piece.special_tokens_allowed) continue;
    const std::string_view within = text.substr(0, piece.end);
    size_t pos = piece.begin;
    while (pos < piece.end) {
      const auto special = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) {
        return within.compare(pos, s.first.size(), s.first) == 0;
      });
      if (special == specials_.end()) {
        ++pos;
        continue;
      }
      if (gap < pos) RETURN_IF_ERROR(EncodeRun(joined, gap, pos, &ids));
      ids.push_back(special->second);
      pos += special->first.size();
      gap = pos;
    }
  }
  if (gap < text.size()) RETURN_IF_ERROR(EncodeRun(joined, gap, text.size(), &ids));
  return ids;
}

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  std::vector<int32_t> run;
  const auto flush = [&] {
    if (run.empty()) return;
    // Ids are range-checked below, the only way SentencePiece's decode fails.
    if (absl::StatusOr<std::string> text = sp_->Decode(run); text.ok()) out += *text;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (IsSpecial(id)) {
      flush();
      if (!skip_special) out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

std::string SentencePieceTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || IsSpecial(id)) return "";
  const std::string_view piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    if (std::optional<char> byte = BytePieceValue(piece)) return std::string(1, *byte);
  }
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpace.size()) == kSpace) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->vocab_size(); }

std::optional<int32_t> SentencePieceTokenizer::TokenToId(std::string_view token) const {
  return sp_->PieceToId(token);
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && (sp_->IsControl(id) || sp_->IsUnknown(id));
}

}  // namespace gecd::model

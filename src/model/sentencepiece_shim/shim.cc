// gecd_sentencepiece_shim: SentencePiece behind the C ABI of shim.h. Built as its own module
// so that libsentencepiece, and the protobuf-lite it carries, is only ever loaded privately.

#include "model/sentencepiece_shim/shim.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

struct GecdSpProcessor {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

constexpr int kInternal = static_cast<int>(sentencepiece::util::StatusCode::kInternal);

// Copies into a malloc'ed buffer, as shim.h promises; null if memory ran out.
char* MallocCopy(const void* data, size_t size, bool terminate) {
  char* out = static_cast<char*>(std::malloc(size + (terminate ? 1 : 0)));
  if (out == nullptr) return nullptr;
  if (size > 0) std::memcpy(out, data, size);
  if (terminate) out[size] = '\0';
  return out;
}

int Fail(int code, std::string_view message, char** error) {
  *error = MallocCopy(message.data(), message.size(), /*terminate=*/true);
  return code;
}

int FromStatus(const sentencepiece::util::Status& status, char** error) {
  if (status.ok()) return 0;
  return Fail(static_cast<int>(status.code()), status.error_message(), error);
}

// No C++ exception (bad_alloc, in practice) may unwind into the C caller.
template <typename Fn>
int Guarded(char** error, Fn fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Fail(kInternal, e.what(), error);
  }
}

}  // namespace

extern "C" {

int gecd_sp_abi_version(void) { return GECD_SP_ABI_VERSION; }

int gecd_sp_load(const char* path, GecdSpProcessor** processor, char** error) {
  return Guarded(error, [&] {
    auto loaded = std::make_unique<GecdSpProcessor>();
    if (int code = FromStatus(loaded->sp.Load(path), error); code != 0) return code;
    *processor = loaded.release();
    return 0;
  });
}

void gecd_sp_destroy(GecdSpProcessor* processor) { delete processor; }

int gecd_sp_encode(const GecdSpProcessor* processor, const char* text, size_t size, int32_t** ids,
                   size_t* count, char** error) {
  return Guarded(error, [&] {
    std::vector<int> pieces;
    if (int code = FromStatus(processor->sp.Encode(std::string_view(text, size), &pieces), error);
        code != 0) {
      return code;
    }
    static_assert(sizeof(int) == sizeof(int32_t));
    *ids = nullptr;
    if (!pieces.empty()) {
      *ids = reinterpret_cast<int32_t*>(
          MallocCopy(pieces.data(), pieces.size() * sizeof(int), /*terminate=*/false));
      if (*ids == nullptr) throw std::bad_alloc();
    }
    *count = pieces.size();
    return 0;
  });
}

int gecd_sp_decode(const GecdSpProcessor* processor, const int32_t* ids, size_t count, char** text,
                   size_t* size, char** error) {
  return Guarded(error, [&] {
    std::string decoded;
    if (int code =
            FromStatus(processor->sp.Decode(std::vector<int>(ids, ids + count), &decoded), error);
        code != 0) {
      return code;
    }
    *text = MallocCopy(decoded.data(), decoded.size(), /*terminate=*/false);
    if (*text == nullptr) throw std::bad_alloc();
    *size = decoded.size();
    return 0;
  });
}

int32_t gecd_sp_vocab_size(const GecdSpProcessor* processor) {
  return processor->sp.GetPieceSize();
}

const char* gecd_sp_id_to_piece(const GecdSpProcessor* processor, int32_t id, size_t* size) {
  const std::string& piece = processor->sp.IdToPiece(id);
  *size = piece.size();
  return piece.data();
}

int32_t gecd_sp_piece_to_id(const GecdSpProcessor* processor, const char* piece, size_t size) {
  const std::string_view wanted(piece, size);
  const int id = processor->sp.PieceToId(wanted);
  // PieceToId answers unk_id for pieces it does not know.
  if (id == processor->sp.unk_id() && processor->sp.IdToPiece(id) != wanted) return -1;
  return id;
}

int gecd_sp_is_control(const GecdSpProcessor* processor, int32_t id) {
  return processor->sp.IsControl(id);
}

int gecd_sp_is_unknown(const GecdSpProcessor* processor, int32_t id) {
  return processor->sp.IsUnknown(id);
}

int gecd_sp_is_byte(const GecdSpProcessor* processor, int32_t id) {
  return processor->sp.IsByte(id);
}

void gecd_sp_free(void* buffer) { std::free(buffer); }

}  // extern "C"

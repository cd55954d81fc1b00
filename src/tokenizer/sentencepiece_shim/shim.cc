// gecd_sentencepiece_shim: SentencePiece behind the C ABI of shim.h. Built as its own module
// so that libsentencepiece, and the protobuf-lite it carries, is only ever loaded privately.

#include "tokenizer/sentencepiece_shim/shim.h"

#include <sentencepiece_processor.h>

#include <cstdint>
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
  std::vector<uint8_t> user_defined;  // by id
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

// Just enough of the protobuf wire format to read ModelProto's piece types: libsentencepiece
// 0.1.97 has no IsUserDefined, and Debian ships no header for its proto classes.
class WireReader {
 public:
  struct Field {
    uint64_t number = 0;
    uint64_t wire_type = 0;
    uint64_t varint = 0;     // wire type 0
    std::string_view bytes;  // wire type 2
  };

  explicit WireReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ == data_.size(); }

  // False on malformed input.
  bool Next(Field* field) {
    uint64_t key = 0;
    if (!Varint(&key)) return false;
    field->number = key >> 3;
    field->wire_type = key & 7;
    switch (field->wire_type) {
      case 0:
        return Varint(&field->varint);
      case 1:
        return Skip(8);
      case 2: {
        uint64_t size = 0;
        if (!Varint(&size) || size > data_.size() - pos_) return false;
        field->bytes = data_.substr(pos_, size);
        pos_ += size;
        return true;
      }
      case 5:
        return Skip(4);
      default:
        return false;
    }
  }

 private:
  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }

  std::string_view data_;
  size_t pos_ = 0;
};

// ModelProto.pieces is field 1; SentencePiece.type is its field 3 (NORMAL = 1 when absent).
bool ReadUserDefined(std::string_view model_proto, std::vector<uint8_t>* user_defined) {
  constexpr uint64_t kUserDefined = 4;
  WireReader model(model_proto);
  WireReader::Field field;
  while (!model.done()) {
    if (!model.Next(&field)) return false;
    if (field.number != 1 || field.wire_type != 2) continue;
    WireReader piece(field.bytes);
    uint64_t type = 1;
    WireReader::Field piece_field;
    while (!piece.done()) {
      if (!piece.Next(&piece_field)) return false;
      if (piece_field.number == 3 && piece_field.wire_type == 0) type = piece_field.varint;
    }
    user_defined->push_back(type == kUserDefined);
  }
  return true;
}

}  // namespace

extern "C" {

int gecd_sp_abi_version(void) { return GECD_SP_ABI_VERSION; }

int gecd_sp_load(const char* path, GecdSpProcessor** processor, char** error) {
  return Guarded(error, [&] {
    auto loaded = std::make_unique<GecdSpProcessor>();
    if (int code = FromStatus(loaded->sp.Load(path), error); code != 0) return code;
    const std::string proto = loaded->sp.serialized_model_proto();
    if (!ReadUserDefined(proto, &loaded->user_defined) ||
        loaded->user_defined.size() != static_cast<size_t>(loaded->sp.GetPieceSize())) {
      return Fail(kInternal, "cannot read the piece types of the loaded model", error);
    }
    *processor = loaded.release();
    return 0;
  });
}

void gecd_sp_destroy(GecdSpProcessor* processor) { delete processor; }

int gecd_sp_encode(const GecdSpProcessor* processor, const char* text, size_t size, int32_t** ids,
                   uint32_t** spans, size_t* count, char** error) {
  return Guarded(error, [&] {
    const std::string_view input(text, size);
    std::vector<int32_t> pieces;
    std::vector<uint32_t> offsets;
    if (spans == nullptr) {
      std::vector<int> encoded;
      if (int code = FromStatus(processor->sp.Encode(input, &encoded), error); code != 0) {
        return code;
      }
      pieces.assign(encoded.begin(), encoded.end());
    } else {
      sentencepiece::ImmutableSentencePieceText encoded;
      if (int code = FromStatus(processor->sp.Encode(input, encoded.mutable_proto()), error);
          code != 0) {
        return code;
      }
      for (const auto& piece : encoded.pieces()) {
        pieces.push_back(static_cast<int32_t>(piece.id()));
        offsets.push_back(piece.begin());
        offsets.push_back(piece.end());
      }
    }
    *ids = nullptr;
    if (spans != nullptr) *spans = nullptr;
    if (!pieces.empty()) {
      *ids = reinterpret_cast<int32_t*>(
          MallocCopy(pieces.data(), pieces.size() * sizeof(int32_t), /*terminate=*/false));
      if (*ids == nullptr) throw std::bad_alloc();
      if (spans != nullptr) {
        *spans = reinterpret_cast<uint32_t*>(
            MallocCopy(offsets.data(), offsets.size() * sizeof(uint32_t), /*terminate=*/false));
        if (*spans == nullptr) {
          std::free(*ids);
          *ids = nullptr;
          throw std::bad_alloc();
        }
      }
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

int gecd_sp_is_unused(const GecdSpProcessor* processor, int32_t id) {
  return processor->sp.IsUnused(id);
}

int gecd_sp_is_user_defined(const GecdSpProcessor* processor, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) < processor->user_defined.size() &&
         processor->user_defined[id] != 0;
}

void gecd_sp_free(void* buffer) { std::free(buffer); }

}  // extern "C"

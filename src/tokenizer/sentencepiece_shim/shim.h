#ifndef GECD_TOKENIZER_SENTENCEPIECE_SHIM_SHIM_H_
#define GECD_TOKENIZER_SENTENCEPIECE_SHIM_SHIM_H_

// The C ABI of gecd_sentencepiece_shim, the one module that links libsentencepiece. Debian's
// libsentencepiece exports the protobuf-lite it embeds, which clashes with gRPC's libprotobuf
// in one symbol namespace; gecd therefore dlopens this shim privately (see
// src/tokenizer/sentencepiece_tokenizer.cc) and reaches SentencePiece only through these
// functions. Plain C types only, so nothing of either protobuf or libstdc++'s containers
// crosses the boundary.
//
// Status codes are sentencepiece::util::StatusCode values, which equal absl::StatusCode's;
// 0 is success. Buffers the shim returns (ids, text, error messages) are malloc'ed inside it
// and must be released with gecd_sp_free.

#include <stddef.h>
#include <stdint.h>

// Bumped on any change to these declarations, so a stale installed shim is refused.
#define GECD_SP_ABI_VERSION 2

// Only these symbols leave the module (it is built with hidden visibility).
#define GECD_SP_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GecdSpProcessor GecdSpProcessor;

GECD_SP_EXPORT int gecd_sp_abi_version(void);

// Loads a tokenizer.model. On success sets *processor; otherwise sets *error.
GECD_SP_EXPORT int gecd_sp_load(const char* path, GecdSpProcessor** processor, char** error);
GECD_SP_EXPORT void gecd_sp_destroy(GecdSpProcessor* processor);

// Encodes UTF-8 text. On success sets *ids (null when *count is 0) and, when `spans` is not
// null, *spans: 2 * *count byte offsets into `text`, the [begin, end) each id was read from;
// otherwise sets *error.
GECD_SP_EXPORT int gecd_sp_encode(const GecdSpProcessor* processor, const char* text, size_t size,
                                  int32_t** ids, uint32_t** spans, size_t* count, char** error);
// Decodes ids into UTF-8 text, not NUL-terminated. On success sets *text; otherwise *error.
GECD_SP_EXPORT int gecd_sp_decode(const GecdSpProcessor* processor, const int32_t* ids,
                                  size_t count, char** text, size_t* size, char** error);

GECD_SP_EXPORT int32_t gecd_sp_vocab_size(const GecdSpProcessor* processor);
// The piece of an id in [0, vocab size), owned by the processor.
GECD_SP_EXPORT const char* gecd_sp_id_to_piece(const GecdSpProcessor* processor, int32_t id,
                                               size_t* size);
// The id of a piece, or -1 when the vocabulary has no such piece.
GECD_SP_EXPORT int32_t gecd_sp_piece_to_id(const GecdSpProcessor* processor, const char* piece,
                                           size_t size);
GECD_SP_EXPORT int gecd_sp_is_control(const GecdSpProcessor* processor, int32_t id);
GECD_SP_EXPORT int gecd_sp_is_unknown(const GecdSpProcessor* processor, int32_t id);
GECD_SP_EXPORT int gecd_sp_is_byte(const GecdSpProcessor* processor, int32_t id);
GECD_SP_EXPORT int gecd_sp_is_unused(const GecdSpProcessor* processor, int32_t id);
// User-defined symbols are pieces SentencePiece matches wherever their text occurs.
GECD_SP_EXPORT int gecd_sp_is_user_defined(const GecdSpProcessor* processor, int32_t id);

GECD_SP_EXPORT void gecd_sp_free(void* buffer);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // GECD_TOKENIZER_SENTENCEPIECE_SHIM_SHIM_H_

#ifndef GECD_MODEL_SAFETENSORS_H_
#define GECD_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mapped_file.h"

// The safetensors format: an 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the raw little-endian data. Files are mmapped and
// tensors are views into the mapping; nothing is copied until a backend converts it.
namespace gecd::model {

enum class DType { kF32, kBF16, kF16, kF8E4M3 };

std::string_view DTypeName(DType dtype);  // safetensors spelling: "F32", "BF16", ...
size_t DTypeSize(DType dtype);

// A tensor inside a mapped file. `data` stays valid while the owning SafetensorsFile lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
  std::string file;  // the file it came from, for error messages

  int64_t num_elements() const;
};

// Header parsed and validated against a file of `file_size` bytes: every dtype is known, every
// shape matches its byte range, ranges lie inside the data section and do not overlap.
struct SafetensorsHeader {
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // offsets relative to the start of the data section
    uint64_t end = 0;
  };
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Parses the first bytes of a file (at least the 8-byte length and the header). `path` only
// labels errors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_bytes,
                                                         std::string_view path);

// One mmapped .safetensors file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  std::vector<std::string> TensorNames() const;
  // Error (NotFound naming file and tensor) when absent.
  absl::StatusOr<TensorView> Get(std::string_view name) const;

 private:
  SafetensorsFile(std::string path, MappedFile file, SafetensorsHeader header);
  std::string path_;
  MappedFile file_;
  SafetensorsHeader header_;
};

// Writes tensors in safetensors layout (header sorted by name, 8-byte aligned data), to a
// temporary file renamed into place so a crash never leaves a half-written checkpoint.
class SafetensorsWriter {
 public:
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void SetMetadata(std::string key, std::string value);
  absl::Status Write(const std::string& path) const;

 private:
  struct Pending {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace gecd::model

#endif  // GECD_MODEL_SAFETENSORS_H_

#ifndef GECD_COMMON_MAPPED_FILE_H_
#define GECD_COMMON_MAPPED_FILE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gecd {

// Owns a read-only, private mmap of a whole file; unmapped on destruction. Move-only.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string: config and tokenizer files.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` as the whole of `path` (reports, tuned configs). PermissionDenied naming
// the path when it cannot.
absl::Status WriteStringToFile(const std::string& path, const std::string& contents);

// The lines of a text file without their "\n" / "\r\n". NotFound for a missing file,
// InvalidArgument for an empty one; both name the path.
absl::StatusOr<std::vector<std::string>> ReadLines(const std::string& path);

}  // namespace gecd

#endif  // GECD_COMMON_MAPPED_FILE_H_

#include "common/zeroed_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gecd {

absl::StatusOr<ZeroedPages> ZeroedPages::Map(size_t bytes) {
  if (bytes == 0) return ZeroedPages();
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes: ", std::strerror(errno)));
  }
  return ZeroedPages(data, bytes);
}

ZeroedPages::ZeroedPages(ZeroedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ZeroedPages& ZeroedPages::operator=(ZeroedPages&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ZeroedPages::~ZeroedPages() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace gecd

#ifndef GECD_COMMON_ZEROED_PAGES_H_
#define GECD_COMMON_ZEROED_PAGES_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace gecd {

// Owns an anonymous private mapping that reads as zeros, with no page touched until it is
// used: a KV cache of hundreds of MB costs nothing at start-up, where zero-filling a vector
// faulted in every page first (a quarter of a second for the default 256 MB). Unmapped on
// destruction. Move-only.
class ZeroedPages {
 public:
  // ResourceExhausted, with the size, when the kernel refuses the mapping.
  static absl::StatusOr<ZeroedPages> Map(size_t bytes);

  ZeroedPages() = default;
  ZeroedPages(ZeroedPages&& other) noexcept;
  ZeroedPages& operator=(ZeroedPages&& other) noexcept;
  ZeroedPages(const ZeroedPages&) = delete;
  ZeroedPages& operator=(const ZeroedPages&) = delete;
  ~ZeroedPages();

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  ZeroedPages(void* data, size_t size) : data_(data), size_(size) {}

  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gecd

#endif  // GECD_COMMON_ZEROED_PAGES_H_

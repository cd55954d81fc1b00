#ifndef GECD_KERNELS_CUDA_UTIL_H_
#define GECD_KERNELS_CUDA_UTIL_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"

// Error conversion and RAII owners for the CUDA objects the backend holds. Every CUDA and
// cuBLASLt call's result goes through CudaStatus / CublasStatus so a failure names the call.
namespace gecd::kernels {

absl::Status CudaStatus(cudaError_t err, const char* what);
absl::Status CublasStatus(cublasStatus_t st, const char* what);

#define GECD_CUDA_RETURN(expr)                                                     \
  do {                                                                             \
    ::absl::Status gecd_cuda_status_ = ::gecd::kernels::CudaStatus((expr), #expr); \
    if (!gecd_cuda_status_.ok()) return gecd_cuda_status_;                         \
  } while (0)
#define GECD_CUBLAS_RETURN(expr)                                                       \
  do {                                                                                 \
    ::absl::Status gecd_cublas_status_ = ::gecd::kernels::CublasStatus((expr), #expr); \
    if (!gecd_cublas_status_.ok()) return gecd_cublas_status_;                         \
  } while (0)

// True when the runtime sees at least one device (tests skip otherwise); `why` gets the
// runtime's reason when not.
bool HaveCudaDevice(std::string* why = nullptr);

// Move-only owner of one CUDA object `T` (a pointer-like handle), released by kRelease.
// Every RAII type below is one of these plus the call that creates the object.
template <typename T, void (*kRelease)(T)>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  ~UniqueHandle() { Reset(); }
  UniqueHandle(UniqueHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) Reset(std::exchange(o.h_, nullptr));
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  // Releases what it held and takes `h`.
  void Reset(T h = nullptr) {
    if (h_ != nullptr) kRelease(h_);
    h_ = h;
  }
  T get() const { return h_; }
  bool valid() const { return h_ != nullptr; }

 private:
  T h_ = nullptr;
};

void ReleaseDeviceMemory(void* p);
void ReleasePinnedMemory(void* p);
void ReleaseStream(cudaStream_t s);
void ReleaseEvent(cudaEvent_t e);
void ReleaseGraphExec(cudaGraphExec_t g);
void ReleaseLtHandle(cublasLtHandle_t h);

enum class Memory { kDevice, kPinned };

// Owns one allocation of device memory (cudaMalloc) or pinned host memory (cudaMallocHost),
// or none.
template <Memory kKind>
class Buffer {
 public:
  absl::Status Allocate(size_t bytes);  // frees what it held first
  void Reset() {
    ptr_.Reset();
    bytes_ = 0;
  }
  void* get() const { return ptr_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_.get());
  }
  size_t bytes() const { return ptr_.valid() ? bytes_ : 0; }

 private:
  std::conditional_t<kKind == Memory::kDevice, UniqueHandle<void*, ReleaseDeviceMemory>,
                     UniqueHandle<void*, ReleasePinnedMemory>>
      ptr_;
  size_t bytes_ = 0;
};
using DeviceBuffer = Buffer<Memory::kDevice>;
using PinnedBuffer = Buffer<Memory::kPinned>;

// A non-blocking cudaStream_t.
class Stream : public UniqueHandle<cudaStream_t, ReleaseStream> {
 public:
  absl::Status Create();
};

// A cudaEvent_t (timing enabled, so gaps between steps can be measured).
class Event : public UniqueHandle<cudaEvent_t, ReleaseEvent> {
 public:
  absl::Status Create();
};

// An instantiated graph (the captured cudaGraph_t is destroyed right after instantiation;
// only the executable is kept).
class GraphExec : public UniqueHandle<cudaGraphExec_t, ReleaseGraphExec> {
 public:
  // Takes ownership of `graph`, instantiates it and destroys it.
  absl::Status Instantiate(cudaGraph_t graph);
  absl::Status Launch(cudaStream_t stream) const;
};

// A cublasLtHandle_t.
class LtHandle : public UniqueHandle<cublasLtHandle_t, ReleaseLtHandle> {
 public:
  absl::Status Create();
};

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_CUDA_UTIL_H_

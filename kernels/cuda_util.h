#ifndef GECD_KERNELS_CUDA_UTIL_H_
#define GECD_KERNELS_CUDA_UTIL_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"

// Error conversion and RAII owners for the CUDA objects the backend holds. Every CUDA and
// cuBLASLt call's result goes through CudaStatus / CublasStatus so a failure names the call.
namespace gecd::kernels {

absl::Status CudaStatus(cudaError_t err, const char* what);
absl::Status CublasStatus(cublasStatus_t st, const char* what);

#define GECD_CUDA_RETURN(expr)                                              \
  do {                                                                      \
    ::absl::Status gecd_cuda_status_ = ::gecd::kernels::CudaStatus((expr), #expr); \
    if (!gecd_cuda_status_.ok()) return gecd_cuda_status_;                  \
  } while (0)
#define GECD_CUBLAS_RETURN(expr)                                              \
  do {                                                                        \
    ::absl::Status gecd_cublas_status_ = ::gecd::kernels::CublasStatus((expr), #expr); \
    if (!gecd_cublas_status_.ok()) return gecd_cublas_status_;                \
  } while (0)

// True when the runtime sees at least one device (tests skip otherwise); `why` gets the
// runtime's reason when not.
bool HaveCudaDevice(std::string* why = nullptr);

// Owns one cudaMalloc allocation (or none).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)),
                                            bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  absl::Status Allocate(size_t bytes);  // frees what it held first
  void Reset();
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Owns one cudaMallocHost (pinned) allocation.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)),
                                            bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  absl::Status Allocate(size_t bytes);
  void Reset();
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Owns a non-blocking cudaStream_t.
class Stream {
 public:
  Stream() = default;
  ~Stream() { Reset(); }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) { Reset(); s_ = std::exchange(o.s_, nullptr); }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  absl::Status Create();
  void Reset();
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Owns a cudaEvent_t (timing enabled, so gaps between steps can be measured).
class Event {
 public:
  Event() = default;
  ~Event() { Reset(); }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) { Reset(); e_ = std::exchange(o.e_, nullptr); }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  absl::Status Create();
  void Reset();
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Owns an instantiated graph (the captured cudaGraph_t is destroyed right after
// instantiation; only the executable is kept).
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() { Reset(); }
  GraphExec(GraphExec&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) { Reset(); g_ = std::exchange(o.g_, nullptr); }
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  // Takes ownership of `graph`, instantiates it and destroys it.
  absl::Status Instantiate(cudaGraph_t graph);
  absl::Status Launch(cudaStream_t stream) const;
  void Reset();
  bool valid() const { return g_ != nullptr; }

 private:
  cudaGraphExec_t g_ = nullptr;
};

// Owns a cublasLtHandle_t.
class LtHandle {
 public:
  LtHandle() = default;
  ~LtHandle() { Reset(); }
  LtHandle(LtHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  LtHandle& operator=(LtHandle&& o) noexcept {
    if (this != &o) { Reset(); h_ = std::exchange(o.h_, nullptr); }
    return *this;
  }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  absl::Status Create();
  void Reset();
  cublasLtHandle_t get() const { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_CUDA_UTIL_H_

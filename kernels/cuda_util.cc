#include "kernels/cuda_util.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gecd::kernels {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", static_cast<int>(err), " (",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                                          ")"));
}

absl::Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": cuBLAS status ", static_cast<int>(st), " (",
                                       cublasLtGetStatusName(st), ": ",
                                       cublasLtGetStatusString(st), ")");
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

bool HaveCudaDevice(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = absl::StrCat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
    cudaGetLastError();  // not sticky; clear it so later calls start clean
    return false;
  }
  if (count == 0 && why != nullptr) *why = "no CUDA device visible";
  return count > 0;
}

absl::Status DeviceBuffer::Allocate(size_t bytes) {
  Reset();
  if (bytes == 0) return absl::OkStatus();
  GECD_CUDA_RETURN(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
  return absl::OkStatus();
}

void DeviceBuffer::Reset() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

absl::Status PinnedBuffer::Allocate(size_t bytes) {
  Reset();
  if (bytes == 0) return absl::OkStatus();
  GECD_CUDA_RETURN(cudaMallocHost(&ptr_, bytes));
  bytes_ = bytes;
  return absl::OkStatus();
}

void PinnedBuffer::Reset() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

absl::Status Stream::Create() {
  Reset();
  GECD_CUDA_RETURN(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  return absl::OkStatus();
}

void Stream::Reset() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
  s_ = nullptr;
}

absl::Status Event::Create() {
  Reset();
  GECD_CUDA_RETURN(cudaEventCreate(&e_));
  return absl::OkStatus();
}

void Event::Reset() {
  if (e_ != nullptr) cudaEventDestroy(e_);
  e_ = nullptr;
}

absl::Status GraphExec::Instantiate(cudaGraph_t graph) {
  Reset();
  const cudaError_t err = cudaGraphInstantiate(&g_, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) g_ = nullptr;
  return CudaStatus(err, "cudaGraphInstantiate");
}

absl::Status GraphExec::Launch(cudaStream_t stream) const {
  return CudaStatus(cudaGraphLaunch(g_, stream), "cudaGraphLaunch");
}

void GraphExec::Reset() {
  if (g_ != nullptr) cudaGraphExecDestroy(g_);
  g_ = nullptr;
}

absl::Status LtHandle::Create() {
  Reset();
  GECD_CUBLAS_RETURN(cublasLtCreate(&h_));
  return absl::OkStatus();
}

void LtHandle::Reset() {
  if (h_ != nullptr) cublasLtDestroy(h_);
  h_ = nullptr;
}

}  // namespace gecd::kernels

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
  const std::string msg =
      absl::StrCat(what, ": cuBLAS status ", static_cast<int>(st), " (", cublasLtGetStatusName(st),
                   ": ", cublasLtGetStatusString(st), ")");
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

void ReleaseDeviceMemory(void* p) { cudaFree(p); }
void ReleasePinnedMemory(void* p) { cudaFreeHost(p); }
void ReleaseStream(cudaStream_t s) { cudaStreamDestroy(s); }
void ReleaseEvent(cudaEvent_t e) { cudaEventDestroy(e); }
void ReleaseGraphExec(cudaGraphExec_t g) { cudaGraphExecDestroy(g); }
void ReleaseLtHandle(cublasLtHandle_t h) { cublasLtDestroy(h); }

template <Memory kKind>
absl::Status Buffer<kKind>::Allocate(size_t bytes) {
  Reset();
  if (bytes == 0) return absl::OkStatus();
  void* p = nullptr;
  if constexpr (kKind == Memory::kDevice) {
    GECD_CUDA_RETURN(cudaMalloc(&p, bytes));
  } else {
    GECD_CUDA_RETURN(cudaMallocHost(&p, bytes));
  }
  ptr_.Reset(p);
  bytes_ = bytes;
  return absl::OkStatus();
}
template class Buffer<Memory::kDevice>;
template class Buffer<Memory::kPinned>;

absl::Status Stream::Create() {
  cudaStream_t s = nullptr;
  GECD_CUDA_RETURN(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Reset(s);
  return absl::OkStatus();
}

absl::Status Event::Create() {
  cudaEvent_t e = nullptr;
  GECD_CUDA_RETURN(cudaEventCreate(&e));
  Reset(e);
  return absl::OkStatus();
}

absl::Status GraphExec::Instantiate(cudaGraph_t graph) {
  cudaGraphExec_t g = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&g, graph, 0);
  cudaGraphDestroy(graph);
  Reset(err == cudaSuccess ? g : nullptr);
  return CudaStatus(err, "cudaGraphInstantiate");
}

absl::Status GraphExec::Launch(cudaStream_t stream) const {
  return CudaStatus(cudaGraphLaunch(get(), stream), "cudaGraphLaunch");
}

absl::Status LtHandle::Create() {
  cublasLtHandle_t h = nullptr;
  GECD_CUBLAS_RETURN(cublasLtCreate(&h));
  Reset(h);
  return absl::OkStatus();
}

}  // namespace gecd::kernels

#include <cuda_runtime.h>

#include "kernels/arch_probe.h"

namespace gecd::kernels {
namespace {

__global__ void ArchProbeKernel(int* out) {
#ifdef __CUDA_ARCH__
  out[0] = __CUDA_ARCH__;
#endif
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
  out[1] = 1;
#else
  out[1] = 0;
#endif
}

}  // namespace

ArchProbe RunArchProbe(int device) {
  ArchProbe probe;
  auto fail = [&probe](cudaError_t err) {
    probe.error = cudaGetErrorString(err);
    return probe;
  };
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) return fail(err);
  int* out = nullptr;
  if (cudaError_t err = cudaMalloc(&out, 2 * sizeof(int)); err != cudaSuccess) return fail(err);
  int host[2] = {0, 0};
  cudaError_t err = cudaMemcpy(out, host, sizeof(host), cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    ArchProbeKernel<<<1, 1>>>(out);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (err != cudaSuccess) return fail(err);
  probe.ok = true;
  probe.cuda_arch = host[0];
  probe.arch_specific = host[1] != 0;
  return probe;
}

}  // namespace gecd::kernels

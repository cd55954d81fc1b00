#include <cuda_runtime.h>

#include "kernels/device_info.h"

namespace gecd::kernels {

DeviceList ListDevices() {
  DeviceList list;
  cudaRuntimeGetVersion(&list.runtime_version);
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    list.error = cudaGetErrorString(err);
    return list;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    list.devices.push_back(
        {i, prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount});
  }
  if (list.devices.empty()) list.error = "no CUDA device visible";
  return list;
}

}  // namespace gecd::kernels

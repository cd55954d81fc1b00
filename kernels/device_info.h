#ifndef GECD_KERNELS_DEVICE_INFO_H_
#define GECD_KERNELS_DEVICE_INFO_H_

#include <string>
#include <vector>

// What the CUDA runtime reports about the visible GPUs. An empty list (with `error` set) on a
// machine without a driver or device: callers treat that as "no GPU", never as a crash.
namespace gecd::kernels {

struct DeviceInfo {
  int id = 0;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
};

struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string error;  // why the list is empty, when it is
  int runtime_version = 0;
};

DeviceList ListDevices();

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_DEVICE_INFO_H_

// The GPU the check runs on: a Hopper-class device (compute capability >= 9.0), and the
// sm_90a build of gecd_kernels is the code that runs on it. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/arch_probe.h"
#include "kernels/device_info.h"

namespace gecd::kernels {
namespace {

TEST(DeviceInfoTest, ListsHopperClassDevices) {
  DeviceList list = ListDevices();
  if (list.devices.empty()) GTEST_SKIP() << "no CUDA device: " << list.error;
  EXPECT_GT(list.runtime_version, 0);
  for (const DeviceInfo& d : list.devices) {
    std::printf("device %d: %s, sm_%d%d, %.1f GiB, %d SMs\n", d.id, d.name.c_str(), d.sm_major,
                d.sm_minor, d.total_memory / double(1 << 30), d.multiprocessors);
    EXPECT_GE(d.sm_major * 10 + d.sm_minor, 90) << d.name << " is older than Hopper (sm_90)";
    EXPECT_GT(d.total_memory, size_t{0});
    EXPECT_GT(d.multiprocessors, 0);
  }
}

TEST(DeviceInfoTest, Sm90aKernelLaunches) {
  DeviceList list = ListDevices();
  if (list.devices.empty()) GTEST_SKIP() << "no CUDA device: " << list.error;
  const DeviceInfo& d = list.devices.front();
  ArchProbe probe = RunArchProbe(d.id);
  ASSERT_TRUE(probe.ok) << probe.error;
  std::printf("device %d ran __CUDA_ARCH__ %d (%s)\n", d.id, probe.cuda_arch,
              probe.arch_specific ? "sm_90a" : "not arch-specific");
  EXPECT_GE(probe.cuda_arch, 900);
  if (d.sm_major == 9 && d.sm_minor == 0) {
    // gecd_kernels carries sm_90a, sm_90 and compute_90 code; on an sm_90 device the driver
    // must pick the sm_90a cubin, or wgmma/FP8 kernels would not be there.
    EXPECT_EQ(probe.cuda_arch, 900);
    EXPECT_TRUE(probe.arch_specific) << "the sm_90a cubin did not run";
  }
}

}  // namespace
}  // namespace gecd::kernels

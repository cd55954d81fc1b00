#ifndef GECD_KERNELS_ARCH_PROBE_H_
#define GECD_KERNELS_ARCH_PROBE_H_

#include <string>

// Launches a one-thread kernel on a device and reports which compiled variant of gecd_kernels
// the driver picked for it: __CUDA_ARCH__ (900 on Hopper) and whether it is the
// architecture-specific sm_90a cubin (wgmma / FP8 features) rather than the sm_90 or PTX one.
namespace gecd::kernels {

struct ArchProbe {
  bool ok = false;
  std::string error;           // the CUDA error when !ok
  int cuda_arch = 0;           // __CUDA_ARCH__ of the code that ran, e.g. 900
  bool arch_specific = false;  // compiled for an "a" target (sm_90a: __CUDA_ARCH_FEAT_SM90_ALL)
};

ArchProbe RunArchProbe(int device);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_ARCH_PROBE_H_

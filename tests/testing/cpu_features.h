#ifndef GECD_TESTS_TESTING_CPU_FEATURES_H_
#define GECD_TESTS_TESTING_CPU_FEATURES_H_

#include <cpuid.h>

// CPU features the tests ask about that __builtin_cpu_supports does not name in every compiler
// the project builds with (clang 14, used by the sanitizer builds, has no "avxvnni").
namespace gecd::testing {

// AVX-VNNI (the VEX-encoded int8 dot products): CPUID leaf 7, sub-leaf 1, EAX bit 4.
inline bool CpuHasAvxVnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 4)) != 0;
}

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_CPU_FEATURES_H_

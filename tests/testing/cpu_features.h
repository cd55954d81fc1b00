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

// VNNI, which the engine's int8 matmuls need: AVX512-VNNI or AVX-VNNI.
inline bool CpuHasVnni() { return __builtin_cpu_supports("avx512vnni") || CpuHasAvxVnni(); }

// BF16 dot products in hardware, which the engine's bf16 matmuls need (engine.cpu_matmul):
// AVX512-BF16 (CPUID leaf 7, sub-leaf 1, EAX bit 5; with AVX-512 usable) or AMX-BF16 (leaf 7,
// sub-leaf 0, EDX bit 22).
inline bool CpuHasBf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool avx512_bf16 = false, amx_bf16 = false;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) avx512_bf16 = (eax & (1u << 5)) != 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) amx_bf16 = (edx & (1u << 22)) != 0;
  return __builtin_cpu_supports("avx512f") && (avx512_bf16 || amx_bf16);
}

// AMX-BF16 (leaf 7, sub-leaf 0, EDX bit 22): oneDNN then runs bf16 matmuls of many rows on AMX
// tiles and those of few rows on AVX512-BF16, which sum in different orders.
inline bool CpuHasAmxBf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 22)) != 0;
}

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_CPU_FEATURES_H_

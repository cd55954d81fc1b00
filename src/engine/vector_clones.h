#ifndef GECD_ENGINE_VECTOR_CLONES_H_
#define GECD_ENGINE_VECTOR_CLONES_H_

// GECD_VECTOR_CLONES marks a hot loop of the cpu backend to be compiled three times, for
// AVX-512, AVX2 and the x86-64 baseline, the copy picked once at load (an ifunc): the project
// builds for the baseline so that one binary runs everywhere, and these loops gain 4x lanes.
// The engine compiles with -ffp-contract=off, so a clone never fuses a multiply and an add that
// the baseline rounds apart: every copy computes the same bits.
//
// Left out under ThreadSanitizer: ifunc resolvers run before its runtime is up and the binary
// crashes at load.
#if defined(__SANITIZE_THREAD__)
#define GECD_VECTOR_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GECD_VECTOR_CLONES
#endif
#endif
#ifndef GECD_VECTOR_CLONES
#define GECD_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

#endif  // GECD_ENGINE_VECTOR_CLONES_H_

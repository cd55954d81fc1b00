#ifndef GECD_TESTS_TESTING_SANITIZED_H_
#define GECD_TESTS_TESTING_SANITIZED_H_

// Whether this test binary runs under ASan or TSan (scripts/sanitize.sh): 2-15x slower, and in
// parallel with other tests, so a latency or throughput ratio says nothing there. GCC says so
// with __SANITIZE_*__, clang 14 only through __has_feature.
namespace gecd::testing {

// GECD_TESTING_SANITIZED is defined for code the preprocessor must leave out under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GECD_TESTING_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GECD_TESTING_SANITIZED 1
#endif
#endif
#if defined(GECD_TESTING_SANITIZED)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_SANITIZED_H_

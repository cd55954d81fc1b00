#ifndef GECD_COMMON_ASSERT_H_
#define GECD_COMMON_ASSERT_H_

#include <string_view>

// Invariant checks, for what the code's own logic guarantees (a look-up that must find its
// entry, a state that cannot occur), never for what input or the environment can cause: those
// are absl::Status errors. A failed check means gecd has a bug, and running on would act on
// state it does not understand, so it logs where and why and aborts (a core, and for the
// daemon a restart by its supervisor).
//
//   GECD_RELEASE_ASSERT(cond, message): always checked.
//   GECD_ASSERT(cond, message): checked unless NDEBUG (debug builds, tests); with NDEBUG it is
//   still compiled, so it cannot rot, but evaluates nothing.
//
// `message` is anything a std::string_view can be made from (a literal, a std::string, an
// absl::StrCat); it is evaluated only when the check fails.
namespace gecd::internal {

// Logs "<file>:<line>: assertion failed: <condition>: <message>" at critical level through the
// process's logger, flushes it, and aborts.
[[noreturn]] void AssertionFailed(const char* file, int line, const char* condition,
                                  std::string_view message);

}  // namespace gecd::internal

#define GECD_RELEASE_ASSERT(cond, message)                                     \
  do {                                                                         \
    if (!(cond)) [[unlikely]] {                                                \
      ::gecd::internal::AssertionFailed(__FILE__, __LINE__, #cond, (message)); \
    }                                                                          \
  } while (false)

#ifdef NDEBUG
#define GECD_ASSERT(cond, message)                        \
  do {                                                    \
    static_cast<void>(sizeof(static_cast<bool>(cond)));   \
    static_cast<void>(sizeof(std::string_view(message))); \
  } while (false)
#else
#define GECD_ASSERT(cond, message) GECD_RELEASE_ASSERT(cond, message)
#endif

#endif  // GECD_COMMON_ASSERT_H_

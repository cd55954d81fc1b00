#ifndef GECD_COMMON_STATUS_MACROS_H_
#define GECD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Early-return helpers for absl::Status / absl::StatusOr, so error paths stay one line.

#define GECD_CONCAT_INNER_(a, b) a##b
#define GECD_CONCAT_(a, b) GECD_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status gecd_status_ = (expr);        \
    if (!gecd_status_.ok()) return gecd_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                           \
  if (!tmp.ok()) return tmp.status();           \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(GECD_CONCAT_(gecd_statusor_, __LINE__), lhs, rexpr)

#endif  // GECD_COMMON_STATUS_MACROS_H_

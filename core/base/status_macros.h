// Small Status helpers that the Abseil release on Debian 12 (20220623) lacks.
//
//   RETURN_IF_ERROR(ValidatePlan(plan, n));
//   ASSIGN_OR_RETURN(Plan plan, strategy.MakePlan(profile));
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CKPT_STATUS_CONCAT_INNER(a, b) a##b
#define CKPT_STATUS_CONCAT(a, b) CKPT_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status ckpt_status_ = (expr);        \
    if (!ckpt_status_.ok()) return ckpt_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK, else moves the
// value into `lhs` (a declaration such as `auto x` or an existing variable).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  CKPT_ASSIGN_OR_RETURN_IMPL(CKPT_STATUS_CONCAT(ckpt_statusor_, __LINE__), lhs, rexpr)

#define CKPT_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

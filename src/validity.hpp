// SPDX-License-Identifier: MIT
// Layer 1 (no I/O): how long a lease may be counted on. Every lease (a guard's LeaseState,
// Redlock's vote) subtracts the same margin from its ttl.
#pragma once

#include <chrono>

namespace redis_lock::detail {

/// What a lease loses to clock drift between us and the server(s): Redlock's ttl/100 + 2 ms.
/// A lease set by a command sent at `t` is counted on until `t + ttl - drift_margin(ttl)`.
inline std::chrono::milliseconds drift_margin(std::chrono::milliseconds ttl) noexcept {
  return ttl / 100 + std::chrono::milliseconds(2);
}

}  // namespace redis_lock::detail

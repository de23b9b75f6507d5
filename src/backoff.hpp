// SPDX-License-Identifier: MIT
// Layer 1 (no I/O): the one exponential backoff every retry of the library uses (an acquire
// waiting out an outage, a connection's reconnects, a give-back sent again, a Cluster
// refusal retried). Each policy is a pair of constants; the doubling is here.
#pragma once

#include <algorithm>
#include <chrono>

namespace redis_lock::detail {

/// A draw in [1, cap] ms for full jitter; deterministic ones in the unit tests.
using JitterDraw = std::chrono::milliseconds (*)(std::chrono::milliseconds cap);

/// Uniform in [1, cap] ms (a per-thread generator).
std::chrono::milliseconds full_jitter(std::chrono::milliseconds cap);
/// Uniform in (cap/2, cap] ms: the wait still grows with the cap, and a fleet that failed
/// together (a server restarted under thousands of connections) comes back spread out.
std::chrono::milliseconds equal_jitter(std::chrono::milliseconds cap);
/// The cap itself (tables in the unit tests).
std::chrono::milliseconds no_jitter(std::chrono::milliseconds cap);

/// The cap of the next wait starts at `first` and doubles up to `max`.
class Backoff {
 public:
  constexpr Backoff(std::chrono::milliseconds first, std::chrono::milliseconds max) noexcept
      : first_(first), max_(max), cap_(first) {}

  /// The next wait without jitter (the cap), and the cap doubles.
  constexpr std::chrono::milliseconds next() noexcept {
    const auto now = cap_;
    cap_ = std::min(cap_ * 2, max_);
    return now;
  }
  /// The next wait drawn by `draw` below the cap (full jitter), and the cap doubles.
  std::chrono::milliseconds next(JitterDraw draw) { return draw(next()); }
  /// The cap the next wait is drawn below.
  constexpr std::chrono::milliseconds cap() const noexcept { return cap_; }
  constexpr void reset() noexcept { cap_ = first_; }

 private:
  std::chrono::milliseconds first_;
  std::chrono::milliseconds max_;
  std::chrono::milliseconds cap_;
};

}  // namespace redis_lock::detail

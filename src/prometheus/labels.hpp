// SPDX-License-Identifier: MIT
// The metric label of each value of the observer's event enums, for PrometheusObserver
// (observer.cpp): their names beside them in observer.hpp (to_string, a switch without a
// default per enum, so that an enumerator added there fails the build until it is named),
// and RunKind's here; the arrays of series that observer.cpp sizes by these never drop a
// value or count it as another.
#pragma once

#include <redis_lock/idempotency_kind.hpp>
#include <redis_lock/observer.hpp>

#include <array>
#include <cstddef>

namespace redis_lock::prometheus_labels {

/// The name beside the enum (observer.hpp's to_string), or null for a value it does not
/// know. (Every name there is a literal: its view ends where the literal does.)
template <class E>
constexpr const char* named(E e) noexcept {
  const auto name = to_string(e);
  return name.empty() ? nullptr : name.data();
}
constexpr const char* label(AcquireKind k) noexcept { return named(k); }
constexpr const char* label(AcquireOutcome o) noexcept {
  // (A failed acquire is counted as an "error", as every other series names a failure.)
  return o == AcquireOutcome::failed ? "error" : named(o);
}
constexpr const char* label(LeaseCommand c) noexcept { return named(c); }
constexpr const char* label(AdminCommand c) noexcept { return named(c); }
constexpr const char* label(RunKind k) noexcept {
  switch (k) {
    case RunKind::executed:
      return "executed";
    case RunKind::replayed:
      return "replayed";
    case RunKind::busy:
      return "busy";
    case RunKind::mismatch:
      return "mismatch";
    case RunKind::pending:
      return "pending";
    case RunKind::not_executed:
      return "not_executed";
    case RunKind::escalated:
      return "escalated";
    case RunKind::absent:
      return "absent";
  }
  return nullptr;
}
/// How many values E has (they count from 0).
template <class E>
constexpr std::size_t count_of() noexcept {
  std::size_t n = 0;
  while (label(static_cast<E>(n)) != nullptr) ++n;
  return n;
}
/// E's labels in the order of its values, then `extra` ones.
template <class E, std::size_t Extra = 0>
constexpr auto labels_of(std::array<const char*, Extra> extra = {}) noexcept {
  std::array<const char*, count_of<E>() + Extra> out{};
  for (std::size_t i = 0; i < count_of<E>(); ++i) out[i] = label(static_cast<E>(i));
  for (std::size_t i = 0; i < Extra; ++i) out[count_of<E>() + i] = extra[i];
  return out;
}
/// The index of `e` in labels_of<E>(); `fallback` for a value it does not know.
template <class E>
constexpr std::size_t index_of(E e, std::size_t fallback) noexcept {
  const auto i = static_cast<std::size_t>(e);
  return i < count_of<E>() ? i : fallback;
}

}  // namespace redis_lock::prometheus_labels

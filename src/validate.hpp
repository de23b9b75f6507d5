// SPDX-License-Identifier: MIT
// Every rule on a configuration and on an operation's arguments, checked before anything is
// sent, in one place. A broken rule is `error::invalid_argument` with the rule's text, which
// the observer's events carry (tests/unit/validation_test.cpp, validate_test.cpp).
#pragma once

#include "printable.hpp"
#include "topology.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/detail/lock_kind.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <span>
#include <string>
#include <string_view>

namespace redis_lock::detail {

/// A broken rule: the error to report and what the rule asks, as a user reads it.
struct Violation {
  boost::system::error_code error{};
  std::string_view rule{};
  explicit operator bool() const noexcept { return static_cast<bool>(error); }
};

/// Leases longer than this are refused as a likely unit mistake (and to keep PX in range).
inline constexpr std::chrono::milliseconds max_ttl{315'360'000'000};  // 10 years

/// What can be checked without I/O: TLS settings only with `tls`, a certificate only with
/// its key, no TLS over a Unix socket, timeouts > 0, a host and a port (or a socket), a
/// database >= 0, and what each topology needs.
Violation check(const ConnectionConfig& config);
/// A key prefix without braces (they would become the keys' hash tag), a printable client
/// name.
Violation check(const ManagerOptions& options);
/// An acquire of `resource` with `options` on a deployment of `shape`.
Violation check(std::string_view resource, const LockOptions& options, const Shape& shape);
/// The kind of lock an acquire asks for, on a deployment of `shape`.
Violation check(LockKind kind, const Shape& shape);
/// `feature` on a deployment of `shape`: its refusal, if it has one.
Violation check(Feature feature, const Shape& shape);
/// async_acquire_all's list of resources (each is checked as an acquire's, too).
Violation check_all(std::span<const std::string> resources);
/// An extension's new ttl.
Violation check_extension(std::chrono::milliseconds ttl);
/// A holder label's and an election value's bounds.
inline constexpr std::size_t max_label_size = 128;
inline constexpr std::size_t max_value_size = 1024;
/// An election's value.
Violation check_value(std::string_view value);
/// A holder label (ManagerOptions::holder_label, LockGuard::async_touch).
Violation check_label(std::string_view label);
/// async_inspect's, async_force_release's and an election's resource, on `shape`.
Violation check_admin(std::string_view resource, const Shape& shape);

}  // namespace redis_lock::detail

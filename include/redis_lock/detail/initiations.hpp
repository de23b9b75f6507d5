// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: the initiation objects of its
// asynchronous operations. Each is a named type that reports the executor its completion
// defaults to (`executor_type`, `get_executor()`), as Asio's own initiations do, so that
// completion tokens which need an executor of their own (`asio::cancel_after` and friends,
// where the Boost version has them) work. Their call operators need the complete LockGuard
// and LockManager: they are defined in <redis_lock/detail/initiations_impl.hpp>, which
// lock.hpp includes at its end.
#pragma once

#include <redis_lock/config.hpp>
#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/lock_kind.hpp>
#include <redis_lock/export.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace redis_lock {

class LockGuard;
class LockManager;

namespace detail {

class LockService;
struct LeaseState;

/// A completion token passed where the LockOptions would go: the overloads that leave the
/// options out take it (a LockOptions, or a braced list, picks the full form).
template <class Token, class Result>
concept token_without_options =
    !std::is_convertible_v<Token, LockOptions> &&
    boost::asio::completion_token_for<Token, void(boost::system::error_code, Result)>;

/// What every initiation carries: where its completion goes by default. `io` is the
/// executor of the manager that made the guard (or of the manager itself), kept through
/// moves and releases; `alive` says whether its execution context still runs.
class initiation_base {
 public:
  using executor_type = boost::asio::any_io_executor;

  initiation_base(executor_type io, ContextAlive alive) noexcept
      : io_(std::move(io)), alive_(std::move(alive)) {}

  /// The manager's executor. A default-constructed guard has none: its completions run on
  /// the handler's own associated executor, which for a handler without one is Asio's
  /// system executor, so that is what is reported then. (Compiled in the library: an
  /// any_io_executor made from the system executor costs every includer a tenth of a
  /// second of template instantiation.)
  REDIS_LOCK_EXPORT executor_type get_executor() const noexcept;

 protected:
  executor_type io_;
  ContextAlive alive_;
};

/// LockManager::async_acquire and its kinds. A moved-from manager (no `service`) completes
/// with `error::invalid_argument` and an empty guard without touching Redis.
struct initiate_acquire : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service, std::string resource,
                  LockOptions options, LockKind kind = {}) const;
};

/// LockManager::async_acquire_all. A moved-from manager completes with
/// `error::invalid_argument` and no guards without touching Redis.
struct initiate_acquire_all : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service,
                  std::vector<std::string> resources, LockOptions options) const;
};

/// LockGuard::async_release: takes the guard over. An empty guard completes with
/// `(no error, false)` without touching Redis.
struct initiate_release : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, LockGuard guard) const;
};

/// LockGuard::async_extend, on a copy of what the guard holds. An empty guard (no
/// `service`) completes with `(no error, false)` without touching Redis.
struct initiate_extend : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service, std::string resource,
                  std::string token, std::shared_ptr<LeaseState> lease,
                  std::chrono::milliseconds ttl) const;
};

/// LockGuard::async_wait_lost, sharing the guard's lease state. An empty guard completes
/// with `operation_aborted`.
struct initiate_wait_lost : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service,
                  std::shared_ptr<LeaseState> lease) const;
};

/// LockManager::async_inspect. A moved-from manager completes with
/// `error::invalid_argument` without touching Redis.
struct initiate_inspect : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service,
                  std::string resource) const;
};

/// LockManager::async_force_release. A moved-from manager completes with
/// `error::invalid_argument` without touching Redis.
struct initiate_force_release : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service,
                  std::string resource) const;
};

/// Election::async_campaign: an acquire of the election's lease that announces its leader.
struct initiate_campaign : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service, std::string resource,
                  std::string value, LockOptions options) const;
};

/// The largest term an Election's observe reported ended (shared with its operations).
using EndedTerm = std::shared_ptr<std::atomic<std::uint64_t>>;

/// Election::async_leader (`after_term` unused) and Election::async_observe.
struct initiate_observe : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service, std::string resource,
                  bool wait, std::uint64_t after_term, EndedTerm ended) const;
};

}  // namespace detail
}  // namespace redis_lock

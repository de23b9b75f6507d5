// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: the initiation objects of its
// asynchronous operations: one, initiate<Params>, for every operation but the release, over
// a struct of each operation's arguments. Each is a named type that reports the executor its
// completion defaults to (`executor_type`, `get_executor()`), as Asio's own initiations do, so that
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
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace redis_lock {

class Diagnostics;
class LockGuard;
class LockManager;

namespace detail {

class Engine;
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

/// How an operation completes without starting: a moved-from manager or an empty guard.
enum class Unstarted : unsigned char {
  invalid_argument,  ///< `error::invalid_argument` and an empty result
  nothing,           ///< no error and an empty result (`false`)
  aborted,           ///< `operation_aborted`
};

/// The Engine a manager's facade is (compiled in the library: the facade's type is not
/// complete here).
REDIS_LOCK_EXPORT Engine& engine_of(LockService& service) noexcept;

// Each operation's arguments, what it completes with, and how it ends without starting. Its
// start_op (compiled in the library, in the op's own file) checks the arguments and starts
// it; initiate<Params> is the one initiation of them all.

/// LockManager::async_acquire and its kinds.
struct AcquireParams {
  using Handler = AcquireHandler;
  using Result = LockGuard;
  static constexpr Unstarted unstarted = Unstarted::invalid_argument;
  std::string resource;
  LockOptions options;
  LockKind kind;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, AcquireParams params, AcquireHandler handler);

/// LockManager::async_acquire_all.
struct AcquireAllParams {
  using Handler = AcquireAllHandler;
  using Result = std::vector<LockGuard>;
  static constexpr Unstarted unstarted = Unstarted::invalid_argument;
  std::vector<std::string> resources;
  LockOptions options;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, AcquireAllParams params, AcquireAllHandler handler);

/// LockGuard::async_extend, on a copy of what the guard holds.
struct ExtendParams {
  using Handler = BoolHandler;
  using Result = bool;
  static constexpr Unstarted unstarted = Unstarted::nothing;
  std::string resource;
  std::string token;
  std::shared_ptr<LeaseState> lease;
  std::chrono::milliseconds ttl;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, ExtendParams params, BoolHandler handler);

/// LockGuard::async_touch, on a copy of what the guard holds.
struct TouchParams {
  using Handler = BoolHandler;
  using Result = bool;
  static constexpr Unstarted unstarted = Unstarted::nothing;
  std::string resource;
  std::string token;
  std::shared_ptr<LeaseState> lease;
  std::string label;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, TouchParams params, BoolHandler handler);

/// LockGuard::async_wait_lost, sharing the guard's lease state.
struct WaitLostParams {
  using Handler = ErrorHandler;
  using Result = void;
  static constexpr Unstarted unstarted = Unstarted::aborted;
  std::shared_ptr<LeaseState> lease;
  bool startable() const noexcept { return lease != nullptr; }
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, WaitLostParams params, ErrorHandler handler);

/// LockManager::async_inspect.
struct InspectParams {
  using Handler = InspectHandler;
  using Result = LockInfo;
  static constexpr Unstarted unstarted = Unstarted::invalid_argument;
  std::string resource;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, InspectParams params, InspectHandler handler);

/// LockManager::async_force_release.
struct ForceReleaseParams {
  using Handler = BoolHandler;
  using Result = bool;
  static constexpr Unstarted unstarted = Unstarted::invalid_argument;
  std::string resource;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, ForceReleaseParams params, BoolHandler handler);

/// Election::async_campaign: an acquire of the election's lease that announces its leader.
struct CampaignParams {
  using Handler = AcquireHandler;
  using Result = LockGuard;
  static constexpr Unstarted unstarted = Unstarted::invalid_argument;
  std::string resource;
  std::string value;
  LockOptions options;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, CampaignParams params, AcquireHandler handler);

/// The largest term an Election's observe reported ended (shared with its operations).
using EndedTerm = std::shared_ptr<std::atomic<std::uint64_t>>;

/// Election::async_leader (`wait` false, `after_term` unused) and Election::async_observe.
struct ObserveParams {
  using Handler = LeaderHandler;
  using Result = std::optional<Leader>;
  static constexpr Unstarted unstarted = Unstarted::invalid_argument;
  std::string resource;
  bool wait = false;
  std::uint64_t after_term = 0;
  EndedTerm ended;
  Diagnostics* diagnostics = nullptr;  ///< bound to the handler (bind_diagnostics), or none
};
REDIS_LOCK_EXPORT void start_op(Engine& engine, ObserveParams params, LeaderHandler handler);

/// Every asynchronous operation of LockManager, LockGuard and Election but the release: an
/// operation that cannot start (no manager; Params::startable() false) completes here,
/// where the handler's type is known; any other goes to its start_op in the compiled
/// library, the handler type-erased.
template <class Params>
struct initiate : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LockService> service, Params params) const;
};

/// LockGuard::async_release: takes the guard over. An empty guard completes with
/// `(no error, false)` without touching Redis.
struct initiate_release : initiation_base {
  using initiation_base::initiation_base;
  template <class Handler>
  void operator()(Handler handler, LockGuard guard) const;
};

}  // namespace detail
}  // namespace redis_lock

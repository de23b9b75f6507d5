// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: the type-erased handlers that the
// initiations hand to the compiled library, and the completion of an operation that has no
// lock to work on.
#pragma once

#include <redis_lock/detail/grant.hpp>
#include <redis_lock/export.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace redis_lock {

class LockGuard;
struct LockInfo;
struct Leader;

namespace detail {

// The engine completes acquires with Grants; the caller's handler, wrapped in SlotClearing,
// gets them as LockGuards (to_public).
using AcquireHandler = boost::asio::any_completion_handler<void(boost::system::error_code, Grant)>;
using AcquireAllHandler =
    boost::asio::any_completion_handler<void(boost::system::error_code, std::vector<Grant>)>;
using BoolHandler = boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;
using ErrorHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
using InspectHandler =
    boost::asio::any_completion_handler<void(boost::system::error_code, LockInfo)>;
using LeaderHandler =
    boost::asio::any_completion_handler<void(boost::system::error_code, std::optional<Leader>)>;

/// Whether the manager's execution context still runs: cleared when it shuts down. Kept by
/// guards and moved-from managers, like the executor.
using ContextAlive = std::shared_ptr<const std::atomic<bool>>;

/// What the caller's handler gets for what the engine completes with: a LockGuard for a
/// Grant (defined in lock.hpp), the rest as it is.
inline LockGuard to_public(Grant&& grant) noexcept;
REDIS_LOCK_EXPORT std::vector<LockGuard> to_public(std::vector<Grant>&& grants);
template <class T>
T&& to_public(T&& value) noexcept {
  return std::forward<T>(value);
}

/// The caller's handler, as the compiled library gets it (type-erased). Invoked, it first
/// empties its associated cancellation slot (the caller's), then runs. Type-erasing a handler
/// whose slot is connected (any_completion_handler, Boost 1.81) attaches a cancellation
/// state to that slot that nothing takes out when the operation completes; Asio's rule is
/// that an operation's slot handler lives no longer than the operation (Asio's own
/// operations clear it before they complete). It runs on the handler's associated executor,
/// where the caller may emit, so never concurrently with an emit. Every associator
/// (executor, allocator, cancellation slot) is the caller's handler's. What the engine
/// completes with reaches the caller as the public type (to_public: a Grant as a LockGuard).
template <class Handler>
struct SlotClearing {
  Handler inner;

  template <class... Args>
  void operator()(Args&&... args) {
    if (auto slot = boost::asio::get_associated_cancellation_slot(inner); slot.is_connected()) {
      slot.clear();
    }
    std::move(inner)(to_public(std::forward<Args>(args))...);
  }
};

template <class Handler>
SlotClearing<std::decay_t<Handler>> slot_clearing(Handler&& handler) {
  return {std::forward<Handler>(handler)};
}

/// `handler(args...)` as a nullary handler. Every associator (executor, allocator,
/// cancellation slot) is the handler's: see the `associator` specialisation below.
template <class Handler, class... Args>
struct BoundCompletion {
  Handler inner;
  std::tuple<Args...> args;

  void operator()() {
    std::apply([this](Args&... a) { std::move(inner)(std::move(a)...); }, args);
  }
};

/// Posts `handler` onto `io` to run on its associated executor (default `io`). Without
/// `io` (a handler whose executor no any_io_executor can hold), a system thread hands it to
/// its associated executor. Compiled in the library, so that this header needs neither
/// `post` nor `bind_executor`.
REDIS_LOCK_EXPORT void post_completion(const boost::asio::any_io_executor& io,
                                       boost::asio::any_completion_handler<void()> handler);

/// Completes an operation on an empty guard (or a moved-from manager) without touching
/// Redis and never inside the initiating call: on the handler's associated executor,
/// defaulting to `io`, the executor of the manager that made the guard (Asio's I/O-executor
/// rule). Only a default-constructed guard has no `io`: its completions then run on the
/// handler's own associated executor (Asio's system executor for a plain callback).
/// When `alive` says the manager's execution context has shut down, the handler is dropped
/// instead of posted onto a dead context (Asio drops pending handlers too).
template <class Handler, class... Args>
void complete_without_lock(const boost::asio::any_io_executor& io, const ContextAlive& alive,
                           Handler&& handler, Args... args) {
  if (io && alive && !alive->load()) return;
  boost::asio::any_io_executor target = io;
  if (!io) {
    // A default-constructed guard: the handler's own executor, posted to at once, so that
    // its context counts the work from now on (the system executor for a plain callback).
    using Own = boost::asio::associated_executor_t<std::decay_t<Handler>>;
    if constexpr (std::is_convertible_v<Own, boost::asio::any_io_executor>) {
      target = boost::asio::get_associated_executor(handler);
    }
  }
  // Type-erased, its slot is emptied before it runs, as SlotClearing says why.
  post_completion(target,
                  boost::asio::any_completion_handler<void()>(
                      BoundCompletion<SlotClearing<std::decay_t<Handler>>, Args...>{
                          slot_clearing(std::forward<Handler>(handler)), {std::move(args)...}}));
}

}  // namespace detail
}  // namespace redis_lock

namespace boost::asio {

template <template <typename, typename> class Associator, typename Handler,
          typename DefaultCandidate>
struct associator<Associator, redis_lock::detail::SlotClearing<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const redis_lock::detail::SlotClearing<Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.inner);
  }
  static auto get(const redis_lock::detail::SlotClearing<Handler>& h,
                  const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.inner, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.inner, c);
  }
};

template <template <typename, typename> class Associator, typename Handler, typename... Args,
          typename DefaultCandidate>
struct associator<Associator, redis_lock::detail::BoundCompletion<Handler, Args...>,
                  DefaultCandidate> : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const redis_lock::detail::BoundCompletion<Handler, Args...>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.inner);
  }
  static auto get(const redis_lock::detail::BoundCompletion<Handler, Args...>& h,
                  const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.inner, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.inner, c);
  }
};

}  // namespace boost::asio

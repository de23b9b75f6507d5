// SPDX-License-Identifier: MIT
// with_lock: acquire, run work under an auto-renewed lease with the lost signal bound to it,
// release, and say whether the work completed under a valid lease. Needs C++20 coroutines;
// kept out of the umbrella header, which stays light.
#pragma once

#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace redis_lock {

/// What with_lock takes, besides a mutex named by a string: one of `limit` permits of a
/// semaphore, a shared or the exclusive hold of a read-write lock, or the mutexes of several
/// resources at once (LockManager::async_acquire_permit, _shared, _exclusive, _all). Views:
/// with_lock copies the names when it is called, so temporaries are fine. (They hold no
/// strings of their own: GCC 12 destroys twice an aggregate with a std::string built in a
/// co_await expression, as `co_await with_lock(locks, Permit{name, 3}, ...)` is.)
struct Permit {
  std::string_view resource;  ///< the semaphore
  std::uint32_t limit = 1;    ///< its number of permits
};
/// A shared (read) hold of the read-write lock `resource` (async_acquire_shared).
struct SharedHold {
  std::string_view resource;  ///< the read-write lock
};
/// The exclusive (write) hold of the read-write lock `resource` (async_acquire_exclusive).
struct ExclusiveHold {
  std::string_view resource;  ///< the read-write lock
};
/// The mutexes of all `resources`, or none (async_acquire_all); the work gets every guard.
struct AllOf {
  std::span<const std::string> resources;  ///< the mutexes' names
};

namespace detail {

/// What a with_lock takes, owned by its coroutine.
struct LockTarget {
  enum class Kind { mutex, permit, shared, exclusive, all } kind = Kind::mutex;
  std::vector<std::string> names;
  std::uint32_t limit = 0;
};
inline LockTarget owned(std::string resource) {
  return {LockTarget::Kind::mutex, {std::move(resource)}, 0};
}
inline LockTarget owned(const Permit& p) {
  return {LockTarget::Kind::permit, {std::string(p.resource)}, p.limit};
}
inline LockTarget owned(const SharedHold& h) {
  return {LockTarget::Kind::shared, {std::string(h.resource)}, 0};
}
inline LockTarget owned(const ExclusiveHold& h) {
  return {LockTarget::Kind::exclusive, {std::string(h.resource)}, 0};
}
inline LockTarget owned(const AllOf& a) {
  return {LockTarget::Kind::all, std::vector<std::string>(a.resources.begin(), a.resources.end()),
          0};
}

/// A Permit, SharedHold, ExclusiveHold or AllOf.
template <class Target>
concept lock_target = std::same_as<Target, Permit> || std::same_as<Target, SharedHold> ||
    std::same_as<Target, ExclusiveHold> || std::same_as<Target, AllOf>;

/// What the work of a with_lock on `Target` is given: the guard, or (AllOf) the guards.
template <class Target>
using held_t = std::conditional_t<std::is_same_v<Target, AllOf>, std::vector<LockGuard>, LockGuard>;

inline std::span<LockGuard> guards_of(LockGuard& guard) noexcept { return {&guard, 1}; }
inline std::span<LockGuard> guards_of(std::vector<LockGuard>& guards) noexcept { return guards; }
inline bool holds(const LockGuard& guard) noexcept { return guard.owns_lock(); }
inline bool holds(const std::vector<LockGuard>& guards) noexcept { return !guards.empty(); }

}  // namespace detail

// GCC 12 takes the frame of an Asio coroutine inlined into its caller for one freed by a
// mismatched operator delete (awaitable_frame_base's sized delete): a false positive that
// -Werror builds would stop at, in every file that calls with_lock.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace detail {

/// with_lock's coroutine. (The public overloads are plain functions that move their
/// arguments in: GCC 12 destroys twice a class prvalue passed straight to a coroutine's
/// by-value parameter inside a co_await expression, as `co_await with_lock(locks,
/// AllOf{names}, ...)` would.)
template <class Held, class Work>
boost::asio::awaitable<boost::system::error_code> run_with_lock(LockManager& locks,
                                                                LockTarget target,
                                                                LockOptions options, Work work) {
  namespace asio = boost::asio;
  options.auto_renew = true;
  boost::system::error_code ec;
  Held held;
  const auto as_tuple = asio::as_tuple(asio::use_awaitable);
  if constexpr (std::is_same_v<Held, std::vector<LockGuard>>) {
    std::tie(ec, held) =
        co_await locks.async_acquire_all(std::move(target.names), options, as_tuple);
  } else {
    const auto& name = target.names.front();
    switch (target.kind) {
      case LockTarget::Kind::permit:
        std::tie(ec, held) =
            co_await locks.async_acquire_permit(name, target.limit, options, as_tuple);
        break;
      case LockTarget::Kind::shared:
        std::tie(ec, held) = co_await locks.async_acquire_shared(name, options, as_tuple);
        break;
      case LockTarget::Kind::exclusive:
        std::tie(ec, held) = co_await locks.async_acquire_exclusive(name, options, as_tuple);
        break;
      default:
        std::tie(ec, held) = co_await locks.async_acquire(name, options, as_tuple);
        break;
    }
  }
  if (ec) co_return ec;
  if (!detail::holds(held)) co_return make_error_code(error::not_acquired);

  // The work is cancelled when a lease is lost, and when the coroutine awaiting with_lock
  // is cancelled: both are forwarded to the one signal the work is bound to. (Binding the
  // work to the lost slot alone hid the caller's cancellation from it.)
  asio::cancellation_signal stop;
  const auto forward = [&stop](asio::cancellation_type type) { stop.emit(type); };
  std::vector<asio::cancellation_slot> lost;
  for (auto& guard : detail::guards_of(held)) {
    auto slot = guard.lost_slot();
    if (!slot.is_connected()) continue;
    slot.assign(forward);
    lost.push_back(slot);
  }
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  auto caller = state.slot();
  if (caller.is_connected()) caller.assign(forward);
  std::exception_ptr failure;
  try {
    co_await asio::co_spawn(co_await asio::this_coro::executor, work(std::as_const(held)),
                            asio::bind_cancellation_slot(stop.slot(), asio::use_awaitable));
  } catch (...) {
    failure = std::current_exception();
  }
  if (caller.is_connected()) caller.clear();
  for (auto& slot : lost) slot.clear();
  bool valid = true;
  const auto now = std::chrono::steady_clock::now();
  for (auto& guard : detail::guards_of(held)) {
    valid = valid && !guard.lost() && now < guard.valid_until();
  }
  bool all_ours = true;  // each release found its lease still ours (or failed to tell)
  for (auto& guard : detail::guards_of(held)) {
    auto [release_ec, released] = co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
    if (!release_ec && !released) all_ours = false;
  }
  // The work's exception wins over a lost lease (it is what the caller must hear of), but
  // for the cancellation the loss itself caused: that is reported as lock_lost.
  bool cancelled_by_loss = false;
  if (failure && !valid) {
    try {
      std::rethrow_exception(failure);
    } catch (const boost::system::system_error& e) {
      cancelled_by_loss = e.code() == asio::error::operation_aborted;
    } catch (...) {
    }
  }
  if (failure && !cancelled_by_loss) std::rethrow_exception(failure);
  if (!valid || !all_ours) co_return make_error_code(error::lock_lost);
  co_return boost::system::error_code{};
}

}  // namespace detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// Takes `target` (a mutex named by a string, or a Permit, SharedHold, ExclusiveHold or
/// AllOf; with `options`, auto_renew forced on), runs `work(held)` — a callable returning
/// `boost::asio::awaitable<void>`, given the `const LockGuard&` (for AllOf the
/// `const std::vector<LockGuard>&`) — with the lost signal of every guard bound to it, then
/// releases what it took.
///
/// Returns no error when the work completed while every lease was certainly held (not lost,
/// and before `valid_until()`); `error::lock_lost` when a lease was lost during the work
/// (the work's pending operation was cancelled) or had expired by the time it finished;
/// `error::not_acquired` when the lock (a permit, the hold, one of the resources) stayed
/// held elsewhere for `options.wait`; the acquire's error otherwise. Exceptions from the
/// work propagate, after the release (also when a lease was lost meanwhile).
///
/// Cancellation: the work is cancelled (terminal) when a lease is lost; cancelling the
/// coroutine that awaits with_lock (as `||` on awaitables does) cancels the acquire or the
/// work, and what was taken is released (by the guards' posted release if the cancelled
/// coroutine cannot await it).
/// Exception safety: the locks are released before an exception from the work propagates.
/// Thread safety: as LockManager::async_acquire; the work runs on the awaiting coroutine's
/// executor (with several threads, keep it on a strand: see LockGuard::lost_slot()).
/// Object lifetimes: `locks` must outlive the call; `work` and `target` are owned by it.
template <class Target, class Work>
  requires detail::lock_target<Target> boost::asio::awaitable<boost::system::error_code> with_lock(
      LockManager& locks, Target target, LockOptions options, Work work) {
    return detail::run_with_lock<detail::held_t<Target>>(locks, detail::owned(target), options,
                                                         std::move(work));
  }

/// with_lock on the mutex `resource` (a string, or anything a std::string is made from).
template <class Work>
boost::asio::awaitable<boost::system::error_code> with_lock(LockManager& locks,
                                                            std::string resource,
                                                            LockOptions options, Work work) {
  return detail::run_with_lock<LockGuard>(locks, detail::owned(std::move(resource)), options,
                                          std::move(work));
}

/// `with_lock(locks, resource, {}, work)`: the default LockOptions (a 10 s lease, one
/// attempt), renewed while the work runs. Results as above.
template <class Work>
  requires(std::invocable<Work&, const LockGuard&>)
boost::asio::awaitable<boost::system::error_code> with_lock(LockManager& locks,
                                                            std::string resource, Work work) {
  return with_lock(locks, std::move(resource), LockOptions{}, std::move(work));
}

/// with_lock for any completion token. Completion signature:
/// `void(std::exception_ptr, boost::system::error_code)`: the work's exception (after the
/// release), and with_lock's result. Runs on `locks.get_executor()`; cancellation, exception
/// safety, thread safety and lifetimes as for with_lock.
template <class Work, class CompletionToken = boost::asio::deferred_t>
auto async_with_lock(LockManager& locks, std::string resource, LockOptions options, Work work,
                     CompletionToken&& token = {}) {
  // co_spawn leaves its own cancellation handler in a connected slot after the handler has
  // run (Boost 1.81); the handler given to it clears the caller's slot first, as every
  // operation of this library does.
  return boost::asio::async_initiate<CompletionToken,
                                     void(std::exception_ptr, boost::system::error_code)>(
      [](auto handler, LockManager* manager, std::string name, LockOptions opts, Work job) {
        boost::asio::co_spawn(manager->get_executor(),
                              with_lock(*manager, std::move(name), opts, std::move(job)),
                              detail::slot_clearing(std::move(handler)));
      },
      token, &locks, std::move(resource), options, std::move(work));
}

/// async_with_lock on a Permit, SharedHold, ExclusiveHold or AllOf. As above.
template <class Target, class Work, class CompletionToken = boost::asio::deferred_t>
  requires detail::lock_target<Target>
auto async_with_lock(LockManager& locks, Target target, LockOptions options, Work work,
                     CompletionToken&& token = {}) {
  return boost::asio::async_initiate<CompletionToken,
                                     void(std::exception_ptr, boost::system::error_code)>(
      [](auto handler, LockManager* manager, detail::LockTarget what, LockOptions opts, Work job) {
        boost::asio::co_spawn(manager->get_executor(),
                              detail::run_with_lock<detail::held_t<Target>>(
                                  *manager, std::move(what), opts, std::move(job)),
                              detail::slot_clearing(std::move(handler)));
      },
      token, &locks, detail::owned(target), options, std::move(work));
}

/// `with_lock(locks, target, {}, work)` on a Permit, SharedHold, ExclusiveHold or AllOf.
template <class Target, class Work>
  requires(detail::lock_target<Target>&& std::invocable<Work&, const detail::held_t<Target>&>)
boost::asio::awaitable<boost::system::error_code> with_lock(LockManager& locks, Target target,
                                                            Work work) {
  return with_lock(locks, std::move(target), LockOptions{}, std::move(work));
}

/// `async_with_lock(locks, resource, {}, work, token)`: the default LockOptions. As above.
template <class Work, class CompletionToken = boost::asio::deferred_t>
  requires(std::invocable<Work&, const LockGuard&>)
auto async_with_lock(LockManager& locks, std::string resource, Work work,
                     CompletionToken&& token = {}) {
  return async_with_lock(locks, std::move(resource), LockOptions{}, std::move(work),
                         std::forward<CompletionToken>(token));
}

}  // namespace redis_lock

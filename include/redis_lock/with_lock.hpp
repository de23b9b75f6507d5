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
#include <exception>
#include <string>
#include <utility>

namespace redis_lock {

/// Takes `resource` (with `options`, auto_renew forced on), runs `work(guard)` — a callable
/// returning `boost::asio::awaitable<void>` — with the guard's lost signal bound to it, then
/// releases the lock.
///
/// Returns no error when the work completed while the lease was certainly held (not lost,
/// and before `valid_until()`); `error::lock_lost` when the lease was lost during the work
/// (the work's pending operation was cancelled) or had expired by the time it finished;
/// `error::not_acquired` when the lock stayed held elsewhere for `options.wait`; the
/// acquire's error otherwise. Exceptions from the work propagate, after the release (also
/// when the lease was lost meanwhile).
///
/// Cancellation: the work is cancelled (terminal) when the lease is lost; cancelling the
/// coroutine that awaits with_lock (as `||` on awaitables does) cancels the acquire or the
/// work, and the lock is released (by the guard's posted release if the cancelled coroutine
/// cannot await it).
/// Exception safety: the lock is released before an exception from the work propagates.
/// Thread safety: as LockManager::async_acquire; the work runs on the awaiting coroutine's
/// executor (with several threads, keep it on a strand: see LockGuard::lost_slot()).
/// Object lifetimes: `locks` must outlive the call; `work` and `resource` are owned by it.
template <class Work>
boost::asio::awaitable<boost::system::error_code> with_lock(LockManager& locks,
                                                            std::string resource,
                                                            LockOptions options, Work work) {
  namespace asio = boost::asio;
  options.auto_renew = true;
  auto [ec, guard] =
      co_await locks.async_acquire(resource, options, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return ec;
  if (!guard) co_return make_error_code(error::not_acquired);

  // The work is cancelled when the lease is lost, and when the coroutine awaiting with_lock
  // is cancelled: both are forwarded to the one signal the work is bound to. (Binding the
  // work to the lost slot alone hid the caller's cancellation from it.)
  asio::cancellation_signal stop;
  const auto forward = [&stop](asio::cancellation_type type) { stop.emit(type); };
  auto lost = guard.lost_slot();
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  auto caller = state.slot();
  if (lost.is_connected()) lost.assign(forward);
  if (caller.is_connected()) caller.assign(forward);
  std::exception_ptr failure;
  try {
    co_await asio::co_spawn(co_await asio::this_coro::executor, work(std::as_const(guard)),
                            asio::bind_cancellation_slot(stop.slot(), asio::use_awaitable));
  } catch (...) {
    failure = std::current_exception();
  }
  if (caller.is_connected()) caller.clear();
  if (lost.is_connected()) lost.clear();
  const bool valid = !guard.lost() && std::chrono::steady_clock::now() < guard.valid_until();
  auto [release_ec, released] = co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
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
  if (!valid || (!release_ec && !released)) co_return make_error_code(error::lock_lost);
  co_return boost::system::error_code{};
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

/// `async_with_lock(locks, resource, {}, work, token)`: the default LockOptions. As above.
template <class Work, class CompletionToken = boost::asio::deferred_t>
  requires(std::invocable<Work&, const LockGuard&>)
auto async_with_lock(LockManager& locks, std::string resource, Work work,
                     CompletionToken&& token = {}) {
  return async_with_lock(locks, std::move(resource), LockOptions{}, std::move(work),
                         std::forward<CompletionToken>(token));
}

}  // namespace redis_lock

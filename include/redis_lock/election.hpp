// SPDX-License-Identifier: MIT
// Leader election on a lock: candidates campaign (wait fairly for the leadership), the leader
// holds a renewed lease and proclaims a value, observers learn of each change of leader by a
// message from the server, not by polling.
#pragma once

#include <redis_lock/lock.hpp>
#include <redis_lock/state.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock {

/// One election, named `name`, among every process whose LockManager uses the same servers
/// and key prefix. Its leadership is the lock on the resource `election:<name>` (what
/// `redis-lock status election:<name>` shows); its observers listen on the channel
/// `<key_prefix>leader:election:<name>`.
///
/// Safety: at most one leader at any instant, as at most one holder of a lock: a leader's
/// guard reports the loss (lost_slot(), async_wait_lost()) at its valid_until(), before the
/// lease can expire on the server and another candidate be elected. A leader paused past its
/// lease (GC, SIGSTOP, a partition) may still act on stale belief: fence its writes with the
/// term (docs/safety.md). Not offered on Redlock (`invalid_argument`): its terms are minted
/// by a majority of independent masters that publish nothing in common.
///
/// Thread safety: the member functions may be called concurrently, like LockManager's.
/// Object lifetimes: the Election may be destroyed while its operations are in flight; it
/// keeps the LockManager's shared state, not the LockManager object.
class REDIS_LOCK_EXPORT Election {
 public:
  /// An election among the users of `locks`' servers. `name` must not be empty (every
  /// operation then fails with `invalid_argument`, before anything is sent).
  Election(LockManager& locks, std::string name);

  /// The election's name.
  const std::string& name() const noexcept { return name_; }
  /// The lock resource behind it: `election:<name>`.
  const std::string& resource() const noexcept { return resource_; }

  /// Waits (fairly, in arrival order with the other candidates) until this candidate leads,
  /// then completes with a guard that keeps the leadership renewed while held (auto_renew is
  /// forced on; `options.renew_every` and `max_hold` apply); `guard.fencing_token()` is the
  /// term. Releasing or destroying the guard resigns: the next candidate leads at once.
  /// `options.wait` bounds the wait as for a lock (0: one attempt), and an empty guard then
  /// says somebody else leads. `value` (at most 1024 bytes, any bytes) is what the
  /// observers and async_leader() see.
  ///
  /// Completion signature: `void(boost::system::error_code, LockGuard)`. Errors as
  /// LockManager::async_acquire's, and `invalid_argument` for a value over 1024 bytes or on
  /// Redlock. Cancellation: supported, as for async_acquire.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_campaign(std::string value, LockOptions options = {}, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, LockGuard)>(
        detail::initiate<detail::CampaignParams>(executor_, context_alive_), token, service_,
        detail::CampaignParams{resource_, std::move(value), options});
  }

  /// `async_campaign(value, {}, token)`: the default LockOptions.
  template <class CompletionToken>
    requires detail::token_without_options<CompletionToken, LockGuard>
  auto async_campaign(std::string value, CompletionToken&& token) {
    return async_campaign(std::move(value), LockOptions{}, std::forward<CompletionToken>(token));
  }

  /// The current leader, if any: one atomic read (as LockManager::async_inspect).
  ///
  /// Completion signature: `void(boost::system::error_code, std::optional<Leader>)`.
  /// Cancellation: supported: completes with `operation_aborted` at once. Otherwise bounded
  /// by `command_timeout`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_leader(CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, std::optional<Leader>)>(
        detail::initiate<detail::ObserveParams>(executor_, context_alive_), token, service_,
        detail::ObserveParams{resource_, /*wait=*/false, 0, {}});
  }

  /// Completes when the leadership differs from `after_term`: a leader with a larger term,
  /// or no leader while `after_term` was leading. Pass 0 to learn the current state at once.
  /// Once this Election has reported that nobody leads after `after_term` (after 0: term
  /// 1), observing that term again waits for the next leader instead, so that a loop that
  /// passes the last term it got (1 after nobody led at the start) never spins while
  /// nobody leads.
  ///
  /// Woken by the server's messages: while the leader stays, an observer sends no command
  /// (each renewal of the leader's lease is announced; only when renewals stop does it read
  /// the state, once, at the lease's end). One observe reports one change: the newest state
  /// when it completes. An observer that calls again with the term it got sees every later
  /// change of leader unless several happen between two of its calls; then it sees the
  /// latest (terms increase, so nothing is seen out of order).
  ///
  /// Completion signature: `void(boost::system::error_code, std::optional<Leader>)`.
  /// Errors: I/O and server errors of the reads it makes (call again to go on).
  /// Cancellation: supported (`bind_cancellation_slot`): completes with
  /// `operation_aborted`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_observe(std::uint64_t after_term, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, std::optional<Leader>)>(
        detail::initiate<detail::ObserveParams>(executor_, context_alive_), token, service_,
        detail::ObserveParams{resource_, /*wait=*/after_term != 0, after_term, ended_});
  }

 private:
  std::shared_ptr<detail::LockService> service_;
  boost::asio::any_io_executor executor_;
  detail::ContextAlive context_alive_;
  std::string name_;
  std::string resource_;
  detail::EndedTerm ended_;  // the largest term an observe reported ended
};

}  // namespace redis_lock

// SPDX-License-Identifier: MIT
// Layer 4 (engine): one async_acquire, from its first attempt to its completion: attempts,
// sleeps in the wait queue (woken by a hand-off), waits out outages within `wait`, confirms
// replication, gives back what it may hold when it fails or is cancelled.
#pragma once

#include "lease.hpp"
#include "script_op.hpp"
#include "waiters.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/lock.hpp>

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock::detail {

/// The guard of a lease taken by an attempt sent at `sent` (its validity is dated from then),
/// watched by the renewal watchdog if `options` ask for it.
LockGuard make_guard(LockService& service, const std::string& resource, const std::string& token,
                     LeaseKind kind, const LockOptions& options, long long fence,
                     std::chrono::steady_clock::time_point sent);

// Handlers are only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
//
// All on the strand. Cancellation sets `cancelled`; the op then gives back whatever it holds
// or has queued before completing with operation_aborted.
struct AcquireOp final : ScriptOp, Waiter {
  using Clock = std::chrono::steady_clock;

  enum class Phase {
    starting,     ///< made, first attempt not sent yet
    attempting,   ///< an acquire script is in flight
    asleep,       ///< on `timer` until the lease could be free (or a hand-off reaches us)
    replicating,  ///< granted; WAIT for min_replicas is in flight
    done,         ///< completed
  };

  /// Full-jitter exponential backoff: the first sleep's cap, and the cap's cap.
  static constexpr std::chrono::milliseconds first_backoff{2};
  static constexpr std::chrono::milliseconds max_backoff{500};

  /// How long a waiter told "held, `pttl` ms left" sleeps before its next attempt. Listening
  /// for hand-offs: until the lease could expire (its holder may have died) or the queue
  /// place needs refreshing, no polling. Not listening, or while the lease is free but
  /// another waiter is first in line (pttl -2): `backoff_draw` (a jittered backoff), at most
  /// pttl.
  static std::chrono::milliseconds sleep_when_held(bool listening, long long pttl,
                                                   std::chrono::milliseconds backoff_draw) noexcept;

  /// What an attempt that failed with `ec` (no reply) does: give back what it may hold (its
  /// link failed after it was written; on Redlock the fan-out gave back already), and wait
  /// the outage out (`waiting`: the acquire has a wait that has not run out) or complete.
  struct AfterFailure {
    bool give_back = false;
    bool wait_out = false;
  };
  static AfterFailure after_failure(boost::system::error_code ec, bool redlock, bool waiting,
                                    bool cancelled) noexcept;

  AcquireOp(AcquireHandler h, std::string resource_name, LockOptions opts);

  void attempt();
  void cancel();
  void on_reply(boost::system::error_code ec, Reply reply) override;
  void on_late_reply(boost::system::error_code ec, const Reply& reply) override;
  void nudge() override;
  void handed(const HandOff& hand_off) override;
  std::optional<QuorumAcquire> quorum_acquire() override;

  AcquireHandler handler;
  std::string resource;
  LockOptions options;
  Clock::time_point called = Clock::now();
  Clock::time_point deadline;
  Clock::time_point attempt_started;
  bool queues = false;  // attempts join the wait queue when the lease is held (not Redlock)
  LeaseKind kind = LeaseKind::mutex;  // a mutex, or a hold of a lease set (acquire_set.lua)
  std::string marker;                 // a lease set's kind and limit ('#S<limit>' or '#RW')
  std::string mutex_queue;            // a lease set's: the same resource's mutex queue key
  std::string data;  // a mutex's: recorded with the lease (label, and a leader's value)

 private:
  /// The lease this attempt may hold (also one a release hands to its queue place), or that
  /// place, expires by then at the latest; a give-back is not retried past
  /// give_back_horizon either.
  Clock::time_point give_back_until() const noexcept;
  void give_back();
  /// Leaves the queue (and hands on a lease that reached us meanwhile).
  void leave();
  /// The lease is ours for the ttl, since `sent` at least: the send time of the attempt
  /// that took it, or of the last one a release that handed it to us saw.
  void granted(long long fence, Clock::time_point sent);
  void sleep_until_retry(long long pttl);
  void wait_out_outage(boost::system::error_code ec, bool gave_back);
  std::chrono::milliseconds next_backoff();
  /// The next attempt after `sleep` (at the wait's deadline at the latest).
  void attempt_after(std::chrono::milliseconds sleep);
  void confirm_replicated(LockGuard guard);
  void finish(boost::system::error_code ec, LockGuard guard);
  void report(Observer& observer, boost::system::error_code ec,
              const LockGuard& guard) const noexcept;

  Phase phase = Phase::starting;
  bool cancelled = false;          // cancellation asked for; acted on at the next step
  bool nudged = false;             // a hand-off message came while an attempt was in flight
  bool in_queue = false;           // our token may be in the wait queue
  bool waited = false;             // joined the queue at least once (reported)
  std::string how;                 // acquire.lua's ARGV[3], set once
  std::string_view member_suffix;  // queue member = token + this: the tail of `how`
  int attempts = 0;
  std::chrono::milliseconds backoff{first_backoff};
  boost::system::error_code last_error;  // of the last attempt, while waiting out an outage
  std::string error_detail;              // the server's error reply, reported with a failure
  std::unique_ptr<boost::asio::steady_timer> timer;
};

}  // namespace redis_lock::detail

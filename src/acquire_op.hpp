// SPDX-License-Identifier: MIT
// Layer 4 (engine): one async_acquire, from its first attempt to its completion. AcquireOp
// is the driver: it does the I/O (the acquire script, the hand-off registration, the timer,
// WAIT, the give-backs) and feeds what happened to AcquireFsm (acquire_fsm.hpp), which
// decides what comes next.
#pragma once

#include "acquire_fsm.hpp"
#include "lease.hpp"
#include "pending.hpp"
#include "script_op.hpp"
#include "waiters.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/detail/grant.hpp>
#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/initiations.hpp>
#include <redis_lock/detail/lock_kind.hpp>

#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock::detail {

class Engine;

/// Whether a plain mutex's waiter queues with a secret, so that a release's signed message
/// grants it the lease with no claim (the one-hop hand-off). Always on but for lock_bench's
/// before-and-after, which turns it off for rounds of the claimed hand-off in between.
inline std::atomic<bool> sign_hand_offs{true};

// start_op(Engine&, AcquireParams, AcquireHandler) (<redis_lock/detail/initiations.hpp>):
// async_acquire of any kind (LockManager::async_acquire*): checks the arguments (a refusal
// completes at once, nothing sent), then the first attempt on the strand. From any thread.
// start_op(Engine&, CampaignParams, AcquireHandler): an election's candidate
// (Election::async_campaign), an acquire that records its value and announces each change
// of leader.

/// The grant of a lease taken by an attempt sent at `sent` (its validity is dated from then),
/// watched by the renewal watchdog if `options` ask for it. The public layer makes it a guard.
Grant make_grant(Engine& service, const std::string& resource, const std::string& token,
                 AcquireKind kind, const LockOptions& options, long long fence,
                 std::chrono::steady_clock::time_point sent);

// Handlers are only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
//
// All on the strand.
struct AcquireOp final : ScriptOp, Waiter, PendingOp {
  using Clock = std::chrono::steady_clock;

  AcquireOp(AcquireHandler h, std::string resource_name, LockOptions opts);
  ~AcquireOp();

  /// The first attempt (start_op set the keys, the token and `deadline`).
  void start();
  void cancel() override;
  /// Queued (or maybe, with an attempt in flight): the give-back written at once.
  void last_words() noexcept override;
  void on_reply(boost::system::error_code ec, Reply reply) override;
  void on_late_reply(boost::system::error_code ec, const Reply& reply) override;
  void nudge() override;
  void handed(const HandOff& hand_off) override;
  std::optional<QuorumAcquire> quorum_acquire() override;

  AcquireHandler handler;
  std::string resource;
  std::string token;   // this attempt's (a new one after an attempt that failed)
  std::string ttl_ms;  // options.ttl
  LockOptions options;
  Clock::time_point called = Clock::now();
  Clock::time_point deadline;
  bool queues = false;  // attempts join the wait queue when the lease is held (not Redlock)
  AcquireKind kind = AcquireKind::mutex;  // a mutex, or a hold of a lease set (acquire_set.lua)
  std::string marker;                     // a lease set's kind and limit ('#S<limit>' or '#RW')
  std::string mutex_queue;                // a lease set's: the same resource's mutex queue key
  std::string data;  // a mutex's: recorded with the lease (label, and a leader's value)
  AcquireFsm fsm{AcquirePlan{}};       // set by start_op, before the op can be reached
  Diagnostics* diagnostics = nullptr;  // bound to the handler: told a failure's detail

 private:
  /// Performs what the state machine decided.
  void run(AcquireFsm::Action action);
  void send_attempt();
  void give_back();
  void sleep_until(Clock::time_point until);
  void confirm_replicated();
  void finish(boost::system::error_code ec, Grant grant);
  void report(Observer& observer, boost::system::error_code ec, const Grant& grant) const noexcept;

  bool claim_expected = false;  // a hand-off message came: the next attempt claims
  std::string member_suffix;    // queue member = token + this; set by the first attempt
  std::string announce;         // an election's candidate: '<P|S><channel>' of its observers
  std::string secret;           // signs the hand-off messages for us (one-hop); empty: none asked
  std::string error_detail;     // the server's error reply, reported with a failure
  bool wait_reported = false;   // on_wait said it joined the queue
  Grant replicating;            // granted, until WAIT confirms it
  std::unique_ptr<boost::asio::steady_timer> timer;
  unsigned timer_armed = 0;  // which sleep_until the timer's pending wait is
};

}  // namespace redis_lock::detail

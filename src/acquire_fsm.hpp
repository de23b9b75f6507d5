// SPDX-License-Identifier: MIT
// Layer 4 (engine), sans-io: the decisions of one acquire, from its first attempt to its
// completion, as a state machine. Events go in with the time they happened (`now`); each
// returns the action the driver (AcquireOp) performs: send an attempt, register for
// hand-offs, sleep, wake, wait for replicas, complete. No I/O, no clock, no randomness of
// its own: tests/unit/acquire_fsm_test.cpp drives it through tables with a fake clock.
// The table of events and actions is in docs/architecture.md ("The life of an acquire").
#pragma once

#include "attempt.hpp"
#include "backoff.hpp"

#include <boost/system/error_code.hpp>

#include <chrono>

namespace redis_lock::detail {

/// What an acquire asked for, fixed when it starts.
struct AcquirePlan {
  std::chrono::milliseconds ttl{0};
  std::chrono::milliseconds wait{0};               ///< 0: one attempt
  std::chrono::steady_clock::time_point deadline;  ///< the wait runs out (time_point::max(): never)
  bool queues = false;  ///< attempts join the wait queue when the lease is held
  Attempt attempt = Attempt::one_server;
  int min_replicas = 0;  ///< > 0: a grant is confirmed by WAIT before it is delivered
};

/// When a wait of `wait` that starts at `now` runs out (time_point::max(): never).
inline std::chrono::steady_clock::time_point wait_deadline(
    std::chrono::steady_clock::time_point now, std::chrono::milliseconds wait) noexcept {
  using Clock = std::chrono::steady_clock;
  return wait >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() -
                                                                       now)
             ? Clock::time_point::max()
             : now + wait;
}

class AcquireFsm {
 public:
  using Clock = std::chrono::steady_clock;

  /// Full-jitter exponential backoff between attempts: the first sleep's cap, and the cap's cap.
  static constexpr std::chrono::milliseconds first_backoff{2};
  static constexpr std::chrono::milliseconds max_backoff{500};

  enum class Phase {
    starting,     ///< made, first attempt not sent yet
    attempting,   ///< an acquire script is in flight
    overdue,      ///< it timed out within the wait: its late reply is awaited, until the deadline
    listening,    ///< held: registering for hand-offs (Action::listen), then resume(listened)
    asleep,       ///< the timer waits until the next attempt (or a hand-off wakes us)
    replicating,  ///< granted; WAIT for min_replicas is in flight
    done,         ///< completed
  };

  struct Action {
    enum class Kind {
      none,       ///< nothing until the next event
      send,       ///< send an attempt now (attempt_started() is `now`)
      listen,     ///< register the token for hand-offs, then call listened()
      sleep,      ///< arm the timer for `until`; call timer_fired() when it fires
      wake,       ///< cancel the timer: its handler calls timer_fired() at once
      replicate,  ///< the lease is ours: make it (fence(), granted_at()) and WAIT, then
                  ///< replicated()
      complete,   ///< cancel the timer, stop listening, complete with `ec` (and the lease if
                  ///< `grant`)
    };
    Kind kind = Kind::none;
    /// Before anything else: give back what the current token may hold, or its queue place
    /// (a release sent again through link failures until give_back_until()).
    bool give_back = false;
    /// Then: the current token is given back or spent; stop listening with it and mint a new
    /// one (a failure to mint: call mint_failed()).
    bool new_token = false;
    /// complete: deliver the lease. After replicate: false drops it (its guard releases it).
    bool grant = false;
    boost::system::error_code ec;  ///< complete
    Clock::time_point until;       ///< sleep

    /// The same, with what the token may hold given back first.
    Action with_give_back() const noexcept {
      auto a = *this;
      a.give_back = true;
      return a;
    }
    friend bool operator==(const Action&, const Action&) = default;
  };

  explicit AcquireFsm(AcquirePlan plan, JitterDraw draw = full_jitter) noexcept
      : plan_(plan), draw_(draw) {}

  // Events. Each returns what to do now.
  Action start(Clock::time_point now);
  /// The attempt's reply: granted with fencing token `fence` (> 0 when well formed).
  Action granted(Clock::time_point now, long long fence);
  /// The attempt's reply: held; `pttl` the lease's remaining ms (-2: free but reserved for
  /// another waiter's claim; <= 0 otherwise: unknown); `place` the queue place it left (its
  /// entry's expiry, acquire.lua; 0: not queued).
  Action held(Clock::time_point now, long long pttl, long long place = 0);
  /// The attempt's reply was not the script's.
  Action malformed();
  /// The attempt's reply was an error (`ec` what it stands for): the script did not run.
  Action refused(boost::system::error_code ec);
  /// The attempt got no reply: `ec` (a link failure, a timeout, a failed connect; of a vote,
  /// the fan-out's outcome, which gave back already). A timeout within the wait is ridden
  /// out: the attempt is overdue, and its late reply (fed as granted / held / refused /
  /// failed, `late` true) decides, or the deadline's timer ends it.
  Action failed(Clock::time_point now, boost::system::error_code ec);
  /// The overdue attempt's late reply refused it in a way an on-time reply is resent for
  /// (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, NOSCRIPT): it never ran; attempt again now.
  Action resend_late(Clock::time_point now);
  /// Registered for hand-offs (Action::listen); `listening`: a release's message reaches us.
  Action listened(Clock::time_point now, bool listening);
  Action timer_fired(Clock::time_point now);
  /// A hand-off message named our token: the lease may be ours to claim; try now.
  Action nudge();
  /// A signed hand-off message (its signature checked by the driver: only a release can have
  /// sent it) named our token, fencing token `fence` and the queue place `place` the release
  /// saw. That place was left by one of our attempts, so the release ran after that attempt
  /// was sent, and the lease it set lasts the ttl from then at least: the lease is ours, dated
  /// from that send time, with no claim (the one-hop hand-off). Where that cannot be known
  /// (another place: an older message; a reply still in flight that may name it), or the
  /// lease would start with less than two thirds of its ttl, or WAIT must confirm it
  /// (min_replicas), or the attempt is a vote, it is a nudge: an attempt claims it.
  Action handed(Clock::time_point now, long long fence, long long place);
  /// The caller cancelled: give back what we hold or have queued, complete with
  /// operation_aborted (at once, or when the reply in flight comes).
  Action cancel();
  /// The WAIT for replicas answered (`ec`: not replicated, an error, a failed link).
  Action replicated(boost::system::error_code ec);
  /// A new token could not be minted (no entropy).
  Action mint_failed();

  /// What an attempt that failed with `ec` (no reply) does: give back what it may hold (its
  /// link failed after it was written; a vote's fan-out gave back already), and wait
  /// the outage out (`waiting`: the acquire has a wait that has not run out) or complete.
  struct AfterFailure {
    bool give_back = false;
    bool wait_out = false;
  };
  static AfterFailure after_failure(boost::system::error_code ec, Attempt attempt, bool waiting,
                                    bool cancelled) noexcept;
  /// Whether a timed-out attempt is awaited (the overdue phase) rather than the end: the
  /// acquire waits, the wait has not run out, not cancelled, not a vote (whose fan-out
  /// settles its own late replies). A timeout during a storm (a server busy with thousands of
  /// handshakes) then costs the waiter nothing but time: no second attempt adds to the load,
  /// and a late grant is still taken when two thirds of its ttl are left.
  static bool awaits_late(boost::system::error_code ec, Attempt attempt, bool waiting,
                          bool cancelled) noexcept;
  /// How long a waiter told "held, `pttl` ms left" sleeps before its next attempt. Listening
  /// for hand-offs: until the lease could expire (its holder may have died) or the queue
  /// place needs refreshing, no polling. Not listening, or while the lease is free but
  /// another waiter is first in line (pttl -2): `backoff_draw` (a jittered backoff), at most
  /// pttl.
  static std::chrono::milliseconds sleep_when_held(bool listening, long long pttl,
                                                   std::chrono::milliseconds backoff_draw) noexcept;
  /// Whether the late reply of an attempt that timed out calls for a give-back: it may have
  /// taken the lease (`may_have_granted`) or a queue place (the acquire waits), or the link
  /// failed before it came (`ec`). An error reply means it never ran.
  static bool give_back_late(boost::system::error_code ec, bool error_reply, bool may_have_granted,
                             bool waits) noexcept;

  Phase phase() const noexcept { return phase_; }
  bool cancelled() const noexcept { return cancelled_; }
  /// Our token may be in the wait queue (what a give-back takes out).
  bool in_queue() const noexcept { return in_queue_; }
  int attempts() const noexcept { return attempts_; }
  /// Joined the queue at least once (reported to the observer).
  bool waited() const noexcept { return waited_; }
  Clock::time_point attempt_started() const noexcept { return attempt_started_; }
  /// The lease the last attempt may hold (also one a release hands to its queue place), or
  /// that place, expires by then at the latest; a give-back is not retried past it.
  Clock::time_point give_back_until() const noexcept;
  /// The granted lease: its fencing token, and since when it is ours for the ttl (the send
  /// time of the attempt that took it).
  long long fence() const noexcept { return fence_; }
  Clock::time_point granted_at() const noexcept { return granted_at_; }
  /// The error of the last attempt while an outage is waited out.
  boost::system::error_code last_error() const noexcept { return last_error_; }
  const AcquirePlan& plan() const noexcept { return plan_; }

 private:
  Action attempt(Clock::time_point now);
  Action sleep(Clock::time_point now, std::chrono::milliseconds duration);
  /// Completes; what is queued is given back first.
  Action complete(boost::system::error_code ec, bool grant = false);
  /// Whether a lease set by the server after a command sent at `sent` starts at `now` with
  /// two thirds of its ttl at least (what an acquire that took a third of its ttl to answer
  /// leaves: what the renewal schedule, and the CLI's grace before SIGTERM, count on).
  bool worth_taking(Clock::time_point sent, Clock::time_point now) const noexcept;
  /// The lease a signed hand-off handed us: ours since `sent`, fencing token `fence`.
  Action take_handed(long long fence, Clock::time_point sent);
  /// An attempt's reply (on time or late) is what the phase waits for.
  bool answerable() const noexcept {
    return phase_ == Phase::attempting || phase_ == Phase::overdue;
  }
  bool waiting(Clock::time_point now) const noexcept {
    return plan_.wait.count() > 0 && now < plan_.deadline;
  }

  AcquirePlan plan_;
  JitterDraw draw_;
  Backoff backoff_{first_backoff, max_backoff};
  Phase phase_ = Phase::starting;
  bool cancelled_ = false;  // asked for; acted on at the next step
  bool nudged_ = false;     // a hand-off message came while an attempt was in flight
  bool in_queue_ = false;
  bool waited_ = false;
  int attempts_ = 0;
  long long pttl_ = 0;  // of the held reply being registered for
  long long fence_ = 0;
  Clock::time_point attempt_started_;
  Clock::time_point granted_at_;
  // The last attempt answered "queued" was sent at queued_sent_ and left queue place
  // queued_place_ (0: none yet): a signed hand-off naming that place was published after it.
  Clock::time_point queued_sent_;
  long long queued_place_ = 0;
  // A signed hand-off that came while an attempt was in flight: its fencing token and place
  // (0: none). Ours if that attempt's reply names the same place.
  long long handed_fence_ = 0;
  long long handed_place_ = 0;
  bool places_rise_ = true;  // every queued reply's place above the last one's
  boost::system::error_code last_error_;
};

}  // namespace redis_lock::detail

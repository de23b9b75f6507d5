// SPDX-License-Identifier: MIT
// Layer 4 (engine): the renewal watchdog. One timer for all auto-renewed leases, at the
// earliest due time; the renewals due together go out in one pipelined write. A lease with
// no confirmed renewal by its valid_until() is lost. RenewalSchedule holds the decisions
// without I/O (tests/unit/renewal_schedule_test.cpp, with a fake clock); Watchdog adds the
// timer, and asks its RenewalHost (the manager's Engine, or a test's fake:
// tests/unit/watchdog_test.cpp) for the rest: the strand, the renewal's command, the observer.
#pragma once

#include "lease.hpp"
#include "resp.hpp"

#include <redis_lock/observer.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace redis_lock::detail {

class Watchdog;

/// What the watchdog needs of the manager it renews for, and no more.
class RenewalHost {
 public:
  using Strand = boost::asio::strand<boost::asio::any_io_executor>;

  /// Where the watchdog's timer completes: the manager's strand, where every call to the
  /// watchdog is made.
  virtual const Strand& timer_strand() const noexcept = 0;
  /// Held weakly by the armed timer: a timer that completes once the host is gone does
  /// nothing.
  virtual std::weak_ptr<void> lifetime() noexcept = 0;
  /// Sends one renewal of `lease` (an extension by its ttl; with min_replicas, counted once
  /// WAIT confirms it). Its answer goes to `watchdog.renewed(lease, sent, ...)` on the
  /// strand, at most once; none when the lease is gone meanwhile.
  virtual void send_renewal(const std::shared_ptr<LeaseState>& lease, Watchdog& watchdog,
                            std::chrono::steady_clock::time_point sent) = 0;
  /// Who hears of renewals and losses (null: nobody).
  virtual Observer* renewal_observer() const noexcept = 0;
  /// The observer hears that `lease`'s hold ended, lost (once per hold).
  virtual void hold_lost(const LeaseState& lease) noexcept = 0;
  /// Where a lost lease's waiter (LockGuard::async_wait_lost) is told when its handler has
  /// no executor of its own.
  virtual const boost::asio::any_io_executor& waiter_executor() const noexcept = 0;

 protected:
  ~RenewalHost() = default;
};

/// When each watched lease is looked at next, and what is then done. No I/O, no clock of
/// its own: `now` is given.
class RenewalSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  /// The renewal interval of a lease: `renew_every` if set (at most the ttl), else ttl / 3.
  static std::chrono::milliseconds interval(std::chrono::milliseconds ttl,
                                            std::chrono::milliseconds renew_every) noexcept;
  /// Renewals are due on a 25 ms grid (rounded down, so never late): leases taken around
  /// the same time renew in the same timer turn and the same write.
  static Clock::time_point grid(Clock::time_point due) noexcept;

  /// What is done with a lease that is due.
  enum class Due {
    skip,   ///< released or lost meanwhile: forget it
    lost,   ///< no confirmed renewal by valid_until(): someone else may have it
    renew,  ///< send a renewal; look again at valid_until() in case it is not answered
    check,  ///< a renewal is in flight, or max_hold is reached: look again at valid_until()
  };
  static Due due(const LeaseState& lease, Clock::time_point now) noexcept;

  /// How a renewal was answered.
  enum class Answer { confirmed, refused, unknown };
  /// When to look at the lease next after a renewal sent at `sent` was answered at `now`
  /// (nothing: it is lost). Unknown: soon, while it may still be ours.
  static std::optional<Clock::time_point> after(const LeaseState& lease, Answer answer,
                                                Clock::time_point sent,
                                                Clock::time_point now) noexcept;

  /// Looks at `lease` at `at` (replacing an earlier entry). True when that is the earliest.
  bool put(const std::shared_ptr<LeaseState>& lease, Clock::time_point at);
  /// True when the schedule is empty afterwards.
  bool remove(LeaseState& lease);
  /// The next due lease by `now`, taken off the schedule.
  std::shared_ptr<LeaseState> take(Clock::time_point now);
  std::optional<Clock::time_point> next() const;
  bool empty() const noexcept { return entries_.empty(); }
  /// Forgets every lease (each is then unscheduled, so a later remove() is a no-op).
  void clear() noexcept;

 private:
  LeaseState::Schedule entries_;
};

/// The schedule's timer and commands, on the host's strand.
class Watchdog {
 public:
  explicit Watchdog(RenewalHost& host) : host_(host) {}
  void watch(const std::shared_ptr<LeaseState>& lease);
  void unwatch(LeaseState& lease);
  void mark_lost(const std::shared_ptr<LeaseState>& lease);
  /// An extension of `lease` sent at `sent` (a renewal's, or async_extend's) was confirmed:
  /// its validity moves to `sent` + `ttl`, unless it lapsed unrenewed before this (the
  /// guard may have reported the loss: it stays lost) or a lapse was seen meanwhile. False
  /// (and the lease marked lost) then.
  bool confirm_or_lose(const std::shared_ptr<LeaseState>& lease,
                       std::chrono::steady_clock::time_point sent, std::chrono::milliseconds ttl);
  /// The answer to `lease`'s renewal sent at `sent` (RenewalHost::send_renewal): `ec`, or
  /// the script's `reply`, from `nodes` (Redlock). Confirmed, the lease is valid for its ttl
  /// from `sent` and renewed again a renewal interval later; refused, it is lost; unknown
  /// (an error), tried again soon while it may still be ours.
  void renewed(const std::shared_ptr<LeaseState>& lease, std::chrono::steady_clock::time_point sent,
               boost::system::error_code ec, const Reply& reply, std::span<const NodeResult> nodes);
  void shutdown() noexcept;

 private:
  void put(const std::shared_ptr<LeaseState>& lease, std::chrono::steady_clock::time_point at);
  void arm(std::chrono::steady_clock::time_point at);
  void on_timer();
  void renew(const std::shared_ptr<LeaseState>& lease);

  RenewalHost& host_;
  RenewalSchedule schedule_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::chrono::steady_clock::time_point timer_at_{};
  bool armed_ = false;
};

}  // namespace redis_lock::detail

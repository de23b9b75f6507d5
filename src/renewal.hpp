// SPDX-License-Identifier: MIT
// Layer 4 (engine): the renewal watchdog. One timer for all auto-renewed leases, at the
// earliest due time; the renewals due together go out in one pipelined write. A lease with
// no confirmed renewal by its valid_until() is lost. RenewalSchedule holds the decisions
// without I/O (tests/unit/renewal_schedule_test.cpp, with a fake clock); Watchdog adds the
// timer and the commands.
#pragma once

#include "lease.hpp"
#include "resp.hpp"

#include <redis_lock/observer.hpp>

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace redis_lock::detail {

class Engine;

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

/// The schedule's timer and commands, on the manager's strand.
class Watchdog {
 public:
  explicit Watchdog(Engine& service) : service_(service) {}
  void watch(const std::shared_ptr<LeaseState>& lease);
  void unwatch(LeaseState& lease);
  void mark_lost(const std::shared_ptr<LeaseState>& lease);
  /// An extension of `lease` sent at `sent` (a renewal's, or async_extend's) was confirmed:
  /// its validity moves to `sent` + `ttl`, unless it lapsed unrenewed before this (the
  /// guard may have reported the loss: it stays lost) or a lapse was seen meanwhile. False
  /// (and the lease marked lost) then.
  bool confirm_or_lose(const std::shared_ptr<LeaseState>& lease,
                       std::chrono::steady_clock::time_point sent, std::chrono::milliseconds ttl);
  void shutdown() noexcept;

 private:
  friend struct RenewOp;
  void put(const std::shared_ptr<LeaseState>& lease, std::chrono::steady_clock::time_point at);
  void arm(std::chrono::steady_clock::time_point at);
  void on_timer();
  void renew(const std::shared_ptr<LeaseState>& lease);
  void renewed(const std::shared_ptr<LeaseState>& lease, std::chrono::steady_clock::time_point sent,
               boost::system::error_code ec, const Reply& reply, std::span<const NodeResult> nodes);

  Engine& service_;
  RenewalSchedule schedule_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::chrono::steady_clock::time_point timer_at_{};
  bool armed_ = false;
};

}  // namespace redis_lock::detail

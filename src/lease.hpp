// SPDX-License-Identifier: MIT
// Layer 4 (engine): what a guard and the renewal watchdog share about one held lease.
#pragma once

#include "validity.hpp"

#include <redis_lock/observer.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock::detail {

struct ScriptOp;

/// A lease's kind is AcquireKind (observer.hpp), the one vocabulary of kinds: a mutex's (the
/// lease key holds its token) and an election's leadership (a mutex whose changes are
/// announced to the election's observers), or one hold of a lease set (acquire_set.lua): a
/// semaphore's permit, a read-write lock's shared or exclusive hold.

/// A hold of a lease set (a zset at the lease key), not a mutex's string lease.
inline bool is_lease_set(AcquireKind kind) noexcept {
  return kind == AcquireKind::permit || kind == AcquireKind::shared ||
         kind == AcquireKind::exclusive;
}

/// The mode letter of a lease set's hold: 'x' the exclusive hold, 's' a permit or a shared
/// hold; not for a mutex.
inline char mode_letter(AcquireKind kind) noexcept {
  return kind == AcquireKind::exclusive ? 'x' : 's';
}

/// The letter after a mutex waiter's manager id in its queue member (where a lease set's
/// waiter has its mode letter): this build's waiters claim a lease handed to them with its
/// record folded into it (shared.lua's hand_on); a member with digits there is a waiter of
/// the build before, handed the lease with its record beside it.
inline constexpr char folded_member_letter = 'f';
/// The same with the waiter's secret after it (32 hex digits): a release hands this waiter
/// the lease as it does a folded one and signs its message with the secret, and the signed
/// message is the grant (the one-hop hand-off: AcquireFsm::handed). A build that knows only
/// 'f' reads no ttl in such a member and hands it the lease for 600 ms with its token alone:
/// the waiter then claims it.
inline constexpr char signed_member_letter = 'g';

using ErrorHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

/// One held lease. Atomics may be read from the guard's thread; everything else lives on
/// the manager's strand.
struct LeaseState {
  using Clock = std::chrono::steady_clock;
  using Schedule = std::multimap<Clock::time_point, std::shared_ptr<LeaseState>>;

  std::string resource;
  std::string token;
  AcquireKind kind = AcquireKind::mutex;
  std::chrono::milliseconds ttl{};
  std::chrono::milliseconds renew_every{};
  Clock::time_point hold_until = Clock::time_point::max();
  bool auto_renew = false;
  // min_replicas of the acquire: renewals and extensions count only once WAIT confirms them.
  int min_replicas = 0;
  std::chrono::milliseconds replication_timeout{};

  std::atomic<Clock::rep> valid_until_ticks{0};
  std::atomic<bool> lost{false};
  std::atomic<bool> released{false};
  std::atomic<bool> has_waiter{false};
  // lost() saw the validity pass unrenewed (and said so): no later confirmation revives it.
  std::atomic<bool> lapse_seen{false};

  // Strand only.
  std::shared_ptr<ScriptOp> renewal;  // built once, reused for every renewal
  bool renewing = false;
  bool scheduled = false;
  Schedule::iterator schedule_entry;
  boost::asio::cancellation_signal signal;
  std::optional<ErrorHandler> lost_waiter;  // emplaced, never assigned (Boost 1.81)
  /// The wait_lost under way, taken out to be completed (none: nobody waits); the next
  /// wait_lost finds the place free.
  std::optional<ErrorHandler> take_lost_waiter() {
    std::optional<ErrorHandler> taken;
    if (lost_waiter) {
      taken.emplace(std::move(*lost_waiter));
      lost_waiter.reset();
    }
    return taken;
  }

  // The observer heard of it (an acquired AcquireEvent): its hold's end is reported once, by
  // whichever of its release (any thread, exchanged) and its loss (the strand) comes first.
  // `held_since` is written on the strand before the guard is handed out.
  std::atomic<bool> hold_reported{false};
  Clock::time_point held_since{};

  Clock::time_point valid_until() const noexcept {
    return Clock::time_point(Clock::duration(valid_until_ticks.load()));
  }
  /// An auto-renewed lease that reached its validity without a confirmed renewal: lost
  /// (lock.hpp), whatever the watchdog is doing. `auto_renew` is written only before the
  /// guard is handed out (Engine::stop_renewing included), so any thread may read it.
  bool lapsed_unrenewed(Clock::time_point now) const noexcept {
    return lapse_seen.load() || (auto_renew && now >= valid_until());
  }
  /// LockGuard::lost(): the watchdog marked the loss (on the manager's strand), or an
  /// auto-renewed lease's validity passed unrenewed, whether or not that strand still runs
  /// (its io_context may be gone). Once said, it stays said: a renewal confirmed later marks
  /// the loss instead of moving the validity (Watchdog::renewed, CompareOp::finish).
  bool known_lost(Clock::time_point now) noexcept {
    if (lost.load() || lapse_seen.load()) return true;
    if (!lapsed_unrenewed(now)) return false;
    lapse_seen.store(true);
    return true;
  }
  /// `started` is when the command that set the ttl was issued; less the drift margin.
  void confirm(Clock::time_point started, std::chrono::milliseconds lease_ttl) noexcept {
    valid_until_ticks.store(
        (started + lease_ttl - drift_margin(lease_ttl)).time_since_epoch().count());
  }
};

/// The observer hears that `lease` is handed out: its hold's end will be reported.
inline void mark_held(LeaseState& lease, LeaseState::Clock::time_point now) noexcept {
  lease.held_since = now;
  lease.hold_reported.store(true);
}

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
#include "renewal.hpp"

#include "completion.hpp"
#include "replies.hpp"

#include <redis_lock/error.hpp>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------
// RenewalSchedule

milliseconds RenewalSchedule::interval(milliseconds ttl, milliseconds renew_every) noexcept {
  return renew_every.count() > 0 ? std::min(renew_every, ttl) : std::max(ttl / 3, milliseconds(1));
}

Clock::time_point RenewalSchedule::grid(Clock::time_point due) noexcept {
  constexpr auto step = std::chrono::duration_cast<Clock::duration>(milliseconds(25));
  const auto since = due.time_since_epoch();
  return Clock::time_point(since - since % step);
}

RenewalSchedule::Due RenewalSchedule::due(const LeaseState& lease, Clock::time_point now) noexcept {
  if (lease.released.load() || lease.lost.load()) return Due::skip;
  if (now >= lease.valid_until() || lease.lapse_seen.load()) return Due::lost;
  // Past max_hold we stop renewing; the lease runs out and is reported lost at valid_until().
  return now < lease.hold_until && !lease.renewing ? Due::renew : Due::check;
}

std::optional<Clock::time_point> RenewalSchedule::after(const LeaseState& lease, Answer answer,
                                                        Clock::time_point sent,
                                                        Clock::time_point now) noexcept {
  switch (answer) {
    case Answer::confirmed:
      return grid(sent + lease.renew_every);
    case Answer::refused:
      return std::nullopt;  // expired, or someone else's now
    case Answer::unknown:
      break;
  }
  const auto retry = std::max(lease.renew_every / 4, milliseconds(10));
  return std::min(now + retry, lease.valid_until());
}

bool RenewalSchedule::put(const std::shared_ptr<LeaseState>& lease, Clock::time_point at) {
  remove(*lease);
  lease->schedule_entry = entries_.emplace(at, lease);
  lease->scheduled = true;
  return entries_.begin()->second == lease;
}

bool RenewalSchedule::remove(LeaseState& lease) {
  if (!lease.scheduled) return false;
  entries_.erase(lease.schedule_entry);
  lease.scheduled = false;
  return entries_.empty();
}

std::shared_ptr<LeaseState> RenewalSchedule::take(Clock::time_point now) {
  if (entries_.empty() || entries_.begin()->first > now) return nullptr;
  auto lease = entries_.begin()->second;
  entries_.erase(entries_.begin());
  lease->scheduled = false;
  return lease;
}

void RenewalSchedule::clear() noexcept {
  for (auto& [at, lease] : entries_) lease->scheduled = false;
  entries_.clear();
}

std::optional<Clock::time_point> RenewalSchedule::next() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.begin()->first;
}

// ---------------------------------------------------------------------------------------
// Watchdog

void Watchdog::watch(const std::shared_ptr<LeaseState>& lease) {
  put(lease, RenewalSchedule::grid(Clock::now() + lease->renew_every));
}

void Watchdog::put(const std::shared_ptr<LeaseState>& lease, Clock::time_point at) {
  unwatch(*lease);  // (the only lease: the timer is cancelled, then armed at `at`)
  // Not the earliest: the timer is armed at or before the earliest already.
  if (schedule_.put(lease, at) || !armed_) arm(at);
}

void Watchdog::arm(Clock::time_point at) {
  if (armed_ && timer_at_ <= at) return;
  if (!timer_) timer_ = std::make_unique<asio::steady_timer>(host_.timer_strand());
  armed_ = true;
  timer_at_ = at;
  timer_->expires_at(at);
  timer_->async_wait([weak = host_.lifetime(), this](error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    if (const auto alive = weak.lock()) {  // (the host owns this watchdog)
      armed_ = false;
      on_timer();
    }
  });
}

void Watchdog::unwatch(LeaseState& lease) {
  if (schedule_.remove(lease) && armed_) {
    armed_ = false;  // idle means idle: no timer for nothing
    timer_->cancel();
  }
}

void Watchdog::on_timer() {
  // At most this many leases per turn: with 100k leases due at once, one turn would build a
  // 10 MB write; in slices, each slice's write goes out while the next is prepared.
  constexpr int slice = 1024;
  const auto now = Clock::now();
  for (int handled = 0; handled < slice; ++handled) {
    auto lease = schedule_.take(now);
    if (!lease) break;
    switch (RenewalSchedule::due(*lease, now)) {
      case RenewalSchedule::Due::skip:
        break;
      case RenewalSchedule::Due::lost:
        mark_lost(lease);
        break;
      case RenewalSchedule::Due::renew:
        renew(lease);
        [[fallthrough]];
      case RenewalSchedule::Due::check:
        // The renewal's reply reschedules the lease. Until then it is checked at its
        // validity: a renewal that is resent (NOSCRIPT, MOVED, ASK, TRYAGAIN, CLUSTERDOWN,
        // WAIT for replicas) restarts its command deadline, which may then fall after it.
        put(lease, lease->valid_until());
        break;
    }
  }
  if (const auto next = schedule_.next()) arm(std::max(*next, now));
}

void Watchdog::renew(const std::shared_ptr<LeaseState>& lease) {
  lease->renewing = true;
  host_.send_renewal(lease, *this, Clock::now());
}

void Watchdog::renewed(const std::shared_ptr<LeaseState>& lease, Clock::time_point sent,
                       error_code ec, const Reply& reply, std::span<const NodeResult> nodes) {
  lease->renewing = false;
  const auto now = Clock::now();
  if (auto* observer = host_.renewal_observer()) {
    // The error as the event reports it; it must not change what happens next (nor
    // last_server_error()), observed or not.
    const error_code event_ec = ec || !reply.is_error() ? ec : error_from_reply(reply.str);
    const bool ok = !event_ec && replies::read_compare(reply) == replies::Compare::done;
    const std::string_view detail =
        reply.is_error() ? std::string_view(reply.str) : std::string_view();
    observer->on_lease(
        {lease->resource, LeaseCommand::renewal, ok, event_ec, now - sent, nodes, detail});
  }
  if (lease->released.load() || lease->lost.load()) return;
  auto answer = RenewalSchedule::Answer::unknown;
  if (!ec && !reply.is_error()) {
    switch (replies::read_compare(reply)) {
      case replies::Compare::done:
        if (!confirm_or_lose(lease, sent, lease->ttl)) return;
        answer = RenewalSchedule::Answer::confirmed;
        break;
      case replies::Compare::not_ours:
        answer = RenewalSchedule::Answer::refused;
        break;
      case replies::Compare::malformed:
        break;
    }
  }
  const auto next = RenewalSchedule::after(*lease, answer, sent, now);
  if (!next) return mark_lost(lease);
  if (!lease->auto_renew) return;  // renewal stopped meanwhile (Engine::stop_renewing)
  put(lease, *next);
}

bool Watchdog::confirm_or_lose(const std::shared_ptr<LeaseState>& lease, Clock::time_point sent,
                               std::chrono::milliseconds ttl) {
  // Confirmed too late: the guard may have reported the loss since its validity passed
  // (lost() reads the clock); it stays lost. Checked again after the confirmation, for a
  // lost() that read the old validity meanwhile.
  if (lease->lapsed_unrenewed(Clock::now())) {
    mark_lost(lease);
    return false;
  }
  lease->confirm(sent, ttl);
  if (lease->lapse_seen.load()) {
    mark_lost(lease);
    return false;
  }
  return true;
}

void Watchdog::mark_lost(const std::shared_ptr<LeaseState>& lease) {
  if (lease->lost.exchange(true)) return;
  unwatch(*lease);
  if (auto* observer = host_.renewal_observer()) {
    observer->on_lost(lease->resource);
    if (lease->hold_reported.exchange(false)) host_.hold_lost(*lease);
  }
  lease->signal.emit(asio::cancellation_type::terminal);
  if (auto waiter = lease->take_lost_waiter()) {
    deliver(host_.waiter_executor(), Defer::no, std::move(*waiter), error_code(error::lock_lost));
  }
}

void Watchdog::shutdown() noexcept {
  schedule_.clear();
  timer_.reset();
  armed_ = false;
}

}  // namespace redis_lock::detail

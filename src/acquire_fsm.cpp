// SPDX-License-Identifier: MIT
#include "acquire_fsm.hpp"

#include "lease_ops.hpp"
#include "replies.hpp"
#include "waiters.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/error.hpp>

namespace redis_lock::detail {

using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Action = AcquireFsm::Action;
using Kind = AcquireFsm::Action::Kind;

namespace {

Action act(Kind kind) {
  Action a;
  a.kind = kind;
  return a;
}

}  // namespace

milliseconds AcquireFsm::sleep_when_held(bool listening, long long pttl,
                                         milliseconds backoff_draw) noexcept {
  if (listening && pttl > 0)
    return std::min(milliseconds(pttl) + milliseconds(1), refresh_interval);
  return pttl > 0 ? std::min(backoff_draw, milliseconds(pttl)) : backoff_draw;
}

AcquireFsm::AfterFailure AcquireFsm::after_failure(error_code ec, Attempt attempt, bool waiting,
                                                   bool cancelled) noexcept {
  // A server that cannot be reached, or is failing over, may be back within the wait: the
  // caller asked to wait for the lock, not to hear of the first hiccup. (A vote decides by
  // majority instead; a timed-out attempt has a late reply to settle first.)
  const bool one_server = attempt == Attempt::one_server;
  return {replies::may_have_run(ec) && one_server,
          replies::is_outage(ec) && one_server && waiting && !cancelled};
}

bool AcquireFsm::awaits_late(error_code ec, Attempt attempt, bool waiting,
                             bool cancelled) noexcept {
  return ec == error::timeout && attempt == Attempt::one_server && waiting && !cancelled;
}

bool AcquireFsm::give_back_late(error_code ec, bool error_reply, bool may_have_granted,
                                bool waits) noexcept {
  if (!ec && error_reply) return false;
  return ec || may_have_granted || waits;
}

Clock::time_point AcquireFsm::give_back_until() const noexcept {
  // A release may hand the lease over up to waiter_ttl after our last attempt, for the ttl.
  return attempt_started_ + std::min(plan_.ttl + waiter_ttl, give_back_horizon);
}

Action AcquireFsm::attempt(Clock::time_point now) {
  auto a = act(Kind::send);
  // A fresh token per vote: what gives back an earlier attempt's grants (a master answering
  // late, a command resent after NOSCRIPT behind this one) can then never release this
  // attempt's lease.
  a.new_token = plan_.attempt == Attempt::vote && attempts_ > 0;
  ++attempts_;
  phase_ = Phase::attempting;
  attempt_started_ = now;
  nudged_ = false;
  handed_fence_ = handed_place_ = 0;
  return a;
}

bool AcquireFsm::worth_taking(Clock::time_point sent, Clock::time_point now) const noexcept {
  return sent + plan_.ttl - drift_margin(plan_.ttl) - now >= plan_.ttl * 2 / 3;
}

Action AcquireFsm::take_handed(long long fence, Clock::time_point sent) {
  in_queue_ = false;  // the release took our member out of the queue
  last_error_ = {};
  fence_ = fence;
  granted_at_ = sent;
  return complete({}, true);
}

Action AcquireFsm::sleep(Clock::time_point now, milliseconds duration) {
  phase_ = Phase::asleep;
  // The deadline bounds every sleep (time_point::max(): `now + duration` cannot pass it).
  const auto until = plan_.deadline - now <= duration ? plan_.deadline : now + duration;
  auto a = act(Kind::sleep);
  a.until = until;
  return a;
}

Action AcquireFsm::complete(error_code ec, bool grant) {
  // Whatever way we end, nothing of ours stays queued: a release may hand the lease to a
  // queued place, and the lease would then stay blocked for our ttl.
  auto a = act(Kind::complete);
  a.give_back = in_queue_;
  a.grant = grant;
  a.ec = ec;
  in_queue_ = false;
  phase_ = Phase::done;
  return a;
}

Action AcquireFsm::start(Clock::time_point now) {
  if (phase_ != Phase::starting) return {};
  return attempt(now);
}

Action AcquireFsm::granted(Clock::time_point now, long long fence) {
  if (!answerable()) return {};
  const bool late = phase_ == Phase::overdue;
  last_error_ = {};
  in_queue_ = false;  // the script took us out of the queue
  if (fence <= 0) return complete(error::unexpected_reply, false).with_give_back();
  fence_ = fence;
  granted_at_ = attempt_started_;
  // Cancelled while the attempt was in flight: what it took goes back at once.
  if (cancelled_) return complete(boost::asio::error::operation_aborted).with_give_back();
  if (late && (plan_.min_replicas > 0 || !worth_taking(attempt_started_, now))) {
    // Too little of the lease is left to hand out, or WAIT cannot confirm it (the reply
    // came on a link given up for its timeout: a WAIT on the new link counts none of that
    // link's writes, and would answer "replicated" at once). What it took goes back, and
    // the wait has not run out (or the deadline's timer would have ended it): try again
    // now, with a new token, since the give-back releases whatever this one holds.
    auto a = attempt(now).with_give_back();
    a.new_token = true;
    return a;
  }
  if (plan_.min_replicas > 0) {
    phase_ = Phase::replicating;
    return act(Kind::replicate);
  }
  return complete({}, true);
}

Action AcquireFsm::held(Clock::time_point now, long long pttl, long long place) {
  if (!answerable()) return {};
  last_error_ = {};
  in_queue_ = plan_.queues;
  waited_ = waited_ || plan_.wait.count() > 0;
  if (cancelled_) return complete(boost::asio::error::operation_aborted);
  if (place > 0) {
    // A place names one attempt only while places rise (the server's clock, 400 ms apart):
    // one that did not (the clock stepped back) could be an earlier attempt's, whose lease
    // a late message speaks of. Signed hand-offs are claimed from then on.
    if (place <= queued_place_) places_rise_ = false;
    queued_sent_ = attempt_started_;
    queued_place_ = place;
    // The signed hand-off that came meanwhile saw this attempt's place: it ran after it.
    if (places_rise_ && handed_place_ == place && worth_taking(attempt_started_, now)) {
      return take_handed(handed_fence_, attempt_started_);
    }
  }
  if (!waiting(now)) return complete({});  // not acquired
  phase_ = Phase::listening;
  pttl_ = pttl;
  return act(Kind::listen);
}

Action AcquireFsm::malformed() {
  if (!answerable()) return {};
  return complete(error::unexpected_reply);
}

Action AcquireFsm::refused(error_code ec) {
  if (!answerable()) return {};
  return complete(ec);
}

Action AcquireFsm::failed(Clock::time_point now, error_code ec) {
  if (!answerable()) return {};
  if (phase_ == Phase::attempting && awaits_late(ec, plan_.attempt, waiting(now), cancelled_)) {
    // The command is written and may yet run: no second attempt beside it (a server slow
    // with a storm of connects would only get more to do), no give-back before its reply
    // (it could overtake the attempt). The deadline's timer ends the wait if the reply does
    // not come first.
    phase_ = Phase::overdue;
    last_error_ = ec;
    auto a = act(Kind::sleep);
    a.until = plan_.deadline;
    return a;
  }
  // The link failed after the script was written (connection lost, a protocol error, a
  // demoted master): it may have run, so the lease (or a queue place) could be ours without
  // our knowing. Give it back, again through link failures until it would have expired.
  // (Connect failures: never written. A timeout: the late reply decides. A vote's
  // quorum call gave back already.)
  const auto next = after_failure(ec, plan_.attempt, waiting(now), cancelled_);
  if (next.give_back) in_queue_ = false;
  if (!next.wait_out) {
    auto a = complete(ec);
    a.give_back = a.give_back || next.give_back;
    return a;
  }
  last_error_ = ec;
  auto a = sleep(now, backoff_.next(draw_));
  a.give_back = next.give_back;
  // The give-back on its way releases whatever this token holds: never use it again.
  a.new_token = next.give_back;
  return a;
}

Action AcquireFsm::listened(Clock::time_point now, bool listening) {
  if (phase_ != Phase::listening) return {};
  // A hand-off message came while the attempt was in flight (or was kept for us and given
  // to us as we registered): the reply may predate it, so try again now.
  if (nudged_) return attempt(now);
  const auto draw = listening && pttl_ > 0 ? milliseconds(0) : backoff_.next(draw_);
  return sleep(now, sleep_when_held(listening, pttl_, draw));
}

Action AcquireFsm::resend_late(Clock::time_point now) {
  if (phase_ != Phase::overdue) return {};
  last_error_ = {};
  return attempt(now);
}

Action AcquireFsm::timer_fired(Clock::time_point now) {
  // The wait ran out before the overdue reply came: the timeout is the answer (the late
  // reply, when it comes, is given back if it took anything: give_back_late).
  if (phase_ == Phase::overdue && !cancelled_ && now >= plan_.deadline)
    return complete(last_error_);
  if (phase_ != Phase::asleep || cancelled_) return {};
  // The wait ran out during an outage: its last error is the answer, not "held".
  if (last_error_ && now >= plan_.deadline) return complete(last_error_);
  return attempt(now);
}

Action AcquireFsm::nudge() {
  if (phase_ == Phase::done || cancelled_) return {};
  nudged_ = true;
  // Asleep: the timer's handler attempts at once. Attempting or registering: seen when the
  // reply comes, or in listened(). (attempt() clears the flag.)
  if (phase_ == Phase::asleep) return act(Kind::wake);
  return {};
}

Action AcquireFsm::handed(Clock::time_point now, long long fence, long long place) {
  if (phase_ == Phase::done || cancelled_) return {};
  if (fence <= 0 || place <= 0 || plan_.min_replicas > 0 || plan_.attempt == Attempt::vote ||
      !places_rise_) {
    return nudge();
  }
  if (phase_ == Phase::attempting || phase_ == Phase::overdue) {
    // Ours if the reply in flight names this place (held()); if it does not, the attempt
    // after it claims (the nudge).
    handed_fence_ = fence;
    handed_place_ = place;
    return nudge();
  }
  if ((phase_ == Phase::asleep || phase_ == Phase::listening) && place == queued_place_ &&
      worth_taking(queued_sent_, now)) {
    return take_handed(fence, queued_sent_);
  }
  return nudge();
}

Action AcquireFsm::cancel() {
  if (phase_ == Phase::done || cancelled_) return {};
  cancelled_ = true;
  // A reply in flight finishes (it says what to give back). One overdue may never come:
  // complete now, its late reply given back if it took anything (give_back_late).
  if (phase_ == Phase::attempting || phase_ == Phase::replicating) return {};
  return complete(boost::asio::error::operation_aborted);
}

Action AcquireFsm::replicated(error_code ec) {
  if (phase_ != Phase::replicating) return {};
  if (!ec && cancelled_) ec = boost::asio::error::operation_aborted;
  return complete(ec, !ec);
}

Action AcquireFsm::mint_failed() {
  if (phase_ == Phase::done) return {};
  return complete(error::server_error);
}

}  // namespace redis_lock::detail

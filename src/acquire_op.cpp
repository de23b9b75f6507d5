// SPDX-License-Identifier: MIT
#include "acquire_op.hpp"

#include "completion.hpp"
#include "lease_ops.hpp"
#include "lock_service.hpp"
#include "renewal.hpp"
#include "replies.hpp"
#include "token.hpp"

#include <redis_lock/error.hpp>

#include <random>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

milliseconds jittered(milliseconds cap) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<long long> dist(1, std::max<long long>(1, cap.count()));
  return milliseconds(dist(rng));
}

}  // namespace

milliseconds AcquireOp::sleep_when_held(bool listening, long long pttl,
                                        milliseconds backoff_draw) noexcept {
  if (listening && pttl > 0)
    return std::min(milliseconds(pttl) + milliseconds(1), refresh_interval);
  return pttl > 0 ? std::min(backoff_draw, milliseconds(pttl)) : backoff_draw;
}

AcquireOp::AfterFailure AcquireOp::after_failure(error_code ec, bool redlock, bool waiting,
                                                 bool cancelled) noexcept {
  // A server that cannot be reached, or is failing over, may be back within the wait: the
  // caller asked to wait for the lock, not to hear of the first hiccup. (Redlock decides by
  // majority instead; a timed-out attempt has a late reply to settle first.)
  return {replies::may_have_run(ec) && !redlock,
          replies::is_outage(ec) && !redlock && waiting && !cancelled};
}

AcquireOp::AcquireOp(AcquireHandler h, std::string resource_name, LockOptions opts)
    : handler(std::move(h)), resource(std::move(resource_name)), options(opts) {
  wants_late = true;
}

Clock::time_point AcquireOp::give_back_until() const noexcept {
  // A release may hand the lease over up to waiter_ttl after our last attempt, for the ttl.
  return attempt_started + std::min(options.ttl + waiter_ttl, give_back_horizon);
}

void AcquireOp::give_back() {
  service->give_back(resource, token, kind, give_back_until(), member_suffix);
}

void AcquireOp::leave() {
  if (in_queue) give_back();
  in_queue = false;
}

std::optional<QuorumAcquire> AcquireOp::quorum_acquire() {
  QuorumAcquire q;
  q.lease_token = token;
  q.fence_key = keys.fence();
  q.ttl = options.ttl;
  q.attempt_started = attempt_started;
  q.give_back = [service = service, resource = resource, token = token, until = give_back_until()](
                    std::size_t master) { give_back_on(*service, master, resource, token, until); };
  return q;
}

void AcquireOp::attempt() {
  if (phase == Phase::done) return;
  if (attempts > 0 && service->redlock()) {
    // A fresh token per Redlock attempt: what gives back an earlier attempt's grants (a
    // master answering late, a command resent after NOSCRIPT behind this one) can then
    // never release this attempt's lease.
    try {
      token = random_token();
    } catch (const std::exception&) {
      return finish(error::server_error, LockGuard{});
    }
  }
  ++attempts;
  phase = Phase::attempting;
  attempt_started = Clock::now();
  nudged = false;
  sent_body = false;
  patience = deadline;
  if (how.empty()) {
    // '<mode><place ms> <member suffix>' (acquire.lua). Redlock waits by backing off: a fair
    // queue on each master would not be one queue.
    // One allocation: the member suffix is the tail of `how`, which is never changed after.
    how.reserve(1 + waiter_ttl_ms.size() + 1 + 16 + 1 + 20 + (data.empty() ? 0 : 1 + data.size()));
    how = service->redlock() ? "R" : queues ? "1" : "0";
    how.append(waiter_ttl_ms).append(" ");
    const std::size_t suffix_at = how.size();
    service->waiters().append_member_suffix(how, options.ttl,
                                            is_lease_set(kind) ? mode_letter(kind) : '\0', data);
    member_suffix = std::string_view(how).substr(suffix_at);
    if (kind == LeaseKind::leader) announce = service->announce_of(resource);
  }
  if (is_lease_set(kind)) {
    set_args(acquire_set_script,
             {keys.lease(), keys.fence(), keys.queue(), keys.queue_expiry(), mutex_queue},
             {token, arg, how, marker});
  } else if (service->redlock()) {
    // No info: each master's fencing token is its own (the quorum's is their maximum).
    set_args(acquire_script, {keys.lease(), keys.fence(), keys.queue(), keys.queue_expiry()},
             {token, arg, how});
  } else if (kind == LeaseKind::leader) {
    set_args(acquire_script,
             {keys.lease(), keys.fence(), keys.queue(), keys.queue_expiry(), keys.info()},
             {token, arg, how, announce});
  } else {
    set_args(acquire_script,
             {keys.lease(), keys.fence(), keys.queue(), keys.queue_expiry(), keys.info()},
             {token, arg, how});
  }
  service->send(std::static_pointer_cast<ScriptOp>(shared_from_this()));
}

void AcquireOp::cancel() {
  if (phase == Phase::done || cancelled) return;
  cancelled = true;
  if (phase == Phase::attempting || phase == Phase::replicating) return;  // the reply finishes
  if (timer) timer->cancel();
  leave();
  finish(asio::error::operation_aborted, LockGuard{});
}

void AcquireOp::nudge() {
  if (phase == Phase::done || cancelled) return;
  // Attempting: the reply in flight may predate the hand-off. Asleep: the timer's handler
  // attempts at once; and a nudge while sleep_until_retry registers us (a kept message),
  // before any timer waits, is seen there. (attempt() clears the flag.)
  nudged = true;
  if (phase == Phase::asleep && timer) timer->cancel();
}

void AcquireOp::handed(const HandOff&) {
  // A hand-off message is a nudge, never a grant. Anyone who may publish on the lock's
  // channels (a lock user may: docs/security.md) can send "<token> <fencing token> <place>";
  // taken at its word, it granted the waiter the lock, with the sender's token, while the
  // real holder still held it. The attempt it prompts claims the lease the release set for
  // us (acquire.lua), and the server's answer says what we hold and with which token: one
  // round trip more than the message alone.
  nudge();
}

void AcquireOp::on_late_reply(error_code ec, const Reply& reply) {
  // The attempt timed out but may have run: give back what it took (or the place it
  // queued for). An error reply means it never ran; an error without a reply means we
  // will never know, so release anyway.
  if (!ec && reply.is_error()) return;
  if (ec || replies::may_have_granted(reply) || options.wait.count() > 0) {
    give_back();
  }
}

void AcquireOp::on_reply(error_code ec, Reply reply) {
  phase = Phase::asleep;  // until the next step says otherwise (no timer armed yet)
  if (ec) {
    // The link failed after the script was written (connection lost, a protocol error, a
    // demoted master): it may have run, so the lease (or a queue place) could be ours
    // without our knowing. Give it back, again through link failures until it would have
    // expired. (Connect failures: never written. A timeout: the late reply decides. On
    // Redlock the quorum call gave back already.)
    const auto next = after_failure(ec, service->redlock(),
                                    options.wait.count() > 0 && Clock::now() < deadline, cancelled);
    if (next.give_back) {
      give_back();
      in_queue = false;
    }
    if (next.wait_out) return wait_out_outage(ec, next.give_back);
    return finish(ec, LockGuard{});
  }
  last_error = {};
  if (reply.is_error()) {
    leave();
    error_detail = reply.str;
    return finish(service->server_error(reply), LockGuard{});
  }
  const auto read = replies::read_acquire(reply);
  switch (read.kind) {
    case replies::Acquire::Kind::malformed:
      leave();
      return finish(error::unexpected_reply, LockGuard{});
    case replies::Acquire::Kind::granted:
      in_queue = false;  // the script took us out of the queue
      if (read.value <= 0) {
        give_back();
        return finish(error::unexpected_reply, LockGuard{});
      }
      return granted(read.value, attempt_started);
    case replies::Acquire::Kind::held:
      break;
  }
  in_queue = queues;
  waited = waited || options.wait.count() > 0;
  if (cancelled) {
    leave();  // also hands on a lease a release gave us meanwhile
    return finish(asio::error::operation_aborted, LockGuard{});
  }
  if (options.wait.count() == 0 || Clock::now() >= deadline) {
    leave();
    return finish({}, LockGuard{});
  }
  sleep_until_retry(read.value);
}

LockGuard make_guard(LockService& service, const std::string& resource, const std::string& token,
                     LeaseKind kind, const LockOptions& options, long long fence,
                     Clock::time_point sent) {
  auto lease = std::make_shared<LeaseState>();
  lease->kind = kind;
  lease->confirm(sent, options.ttl);
  lease->min_replicas = options.min_replicas;
  lease->replication_timeout = options.replication_timeout;
  if (options.auto_renew || service.observer()) lease->resource = resource;  // for on_lost
  if (options.auto_renew) {
    lease->token = token;
    lease->ttl = options.ttl;
    lease->renew_every = RenewalSchedule::interval(options.ttl, options.renew_every);
    if (options.max_hold.count() > 0) lease->hold_until = sent + options.max_hold;
    lease->auto_renew = true;
    service.watch(lease);
  }
  return GuardAccess::make(service.shared_from_this(), resource, token,
                           static_cast<std::uint64_t>(fence), std::move(lease));
}

void AcquireOp::granted(long long fence, Clock::time_point sent) {
  auto guard = make_guard(*service, resource, token, kind, options, fence, sent);
  if (cancelled) return finish(asio::error::operation_aborted, LockGuard{});  // guard releases
  if (options.min_replicas > 0) return confirm_replicated(std::move(guard));
  finish({}, std::move(guard));
}

void AcquireOp::confirm_replicated(LockGuard guard) {
  // WAIT on the connection that carried the acquire: it counts the replicas that have
  // everything written on it so far, our SET included.
  auto shared = std::make_shared<LockGuard>(std::move(guard));
  phase = Phase::replicating;
  service->wait_replicas(
      node, options.min_replicas, options.replication_timeout,
      Connection::Callback([op = std::static_pointer_cast<AcquireOp>(shared_from_this()), shared](
                               error_code ec, Reply reply) {
        op->phase = Phase::asleep;
        if (!ec && reply.is_error()) {
          op->error_detail = reply.str;
          ec = op->service->server_error(reply);
        }
        if (!ec) ec = replies::replication_outcome(reply, op->options.min_replicas);
        if (!ec && op->cancelled) ec = asio::error::operation_aborted;
        if (ec) return op->finish(ec, LockGuard{});  // *shared releases the lease
        op->finish({}, std::move(*shared));
      }));
}

void AcquireOp::wait_out_outage(error_code ec, bool gave_back) {
  last_error = ec;
  if (gave_back) {
    // The give-back on its way releases whatever this token holds: never use it again.
    service->remove_waiter(token);
    try {
      token = random_token();
    } catch (const std::exception&) {
      return finish(error::server_error, LockGuard{});
    }
  }
  attempt_after(next_backoff());
}

milliseconds AcquireOp::next_backoff() {
  const auto sleep = jittered(backoff);
  backoff = std::min(backoff * 2, max_backoff);
  return sleep;
}

void AcquireOp::attempt_after(milliseconds sleep) {
  phase = Phase::asleep;
  if (!timer) timer = std::make_unique<asio::steady_timer>(service->strand());
  timer->expires_at(std::min(deadline, Clock::now() + sleep));
  timer->async_wait([op = std::static_pointer_cast<AcquireOp>(shared_from_this())](error_code) {
    if (op->phase == Phase::done || op->cancelled) return;
    // The wait ran out during an outage: its last error is the answer, not "held".
    if (op->last_error && Clock::now() >= op->deadline) {
      return op->finish(op->last_error, LockGuard{});
    }
    op->attempt();
  });
}

void AcquireOp::sleep_until_retry(long long pttl) {
  // Idempotent; again each time, it resubscribes after a lost subscriber link. A hand-off
  // message that overtook this reply is handed to us in there.
  service->add_waiter(token, std::static_pointer_cast<AcquireOp>(shared_from_this()), slot);
  if (phase != Phase::asleep) return;  // it granted us the lease
  if (nudged) return attempt();
  const bool listening = service->waiters().listening(slot);
  attempt_after(
      sleep_when_held(listening, pttl, listening && pttl > 0 ? milliseconds(0) : next_backoff()));
}

void AcquireOp::finish(error_code ec, LockGuard guard) {
  if (phase == Phase::done) return;
  phase = Phase::done;
  // Whatever way we end, nothing of ours stays queued: a release may hand the lease to a
  // queued place, and the lease would then stay blocked for our ttl.
  leave();
  if (auto* observer = service->observer()) report(*observer, ec, guard);
  service->remove_waiter(token);
  deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(guard));
}

void AcquireOp::report(Observer& observer, error_code ec, const LockGuard& guard) const noexcept {
  AcquireEvent e{resource, AcquireOutcome::acquired, ec,           Clock::now() - called, attempts,
                 waited,   guard.fencing_token(),    node_results, error_detail};
  if (ec == asio::error::operation_aborted) {
    e.outcome = AcquireOutcome::cancelled;
  } else if (ec) {
    e.outcome = AcquireOutcome::failed;
  } else if (!guard) {
    e.outcome = AcquireOutcome::not_acquired;
  }
  observer.on_acquire(e);
}

}  // namespace redis_lock::detail

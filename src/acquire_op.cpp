// SPDX-License-Identifier: MIT
#include "acquire_op.hpp"

#include "completion.hpp"
#include "decimal.hpp"
#include "engine.hpp"
#include "lease_ops.hpp"
#include "redirect.hpp"
#include "renewal.hpp"
#include "replies.hpp"
#include "script_call.hpp"
#include "token.hpp"
#include "validate.hpp"

#include <redis_lock/error.hpp>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// Starts a checked acquire (the token, the deadline, cancellation, the first attempt).
void start(Engine& engine, std::shared_ptr<AcquireOp> op) {
  const auto& options = op->options;
  op->service = engine.shared_from_this();
  op->keys = engine.keys_of(op->resource, op->kind);
  if (is_lease_set(op->kind)) op->mutex_queue = engine.keys_of(op->resource).queue();
  op->slot = engine.slot_of(op->keys.lease());
  op->durable = options.min_replicas > 0;
  op->queues = options.wait.count() > 0 && engine.shape().queues();
  op->ttl_ms = to_decimal(options.ttl.count());
  op->deadline = wait_deadline(Clock::now(), options.wait);
  // The state machine exists before anything can reach the op (a cancellation included).
  op->fsm = AcquireFsm(AcquirePlan{options.ttl, options.wait, op->deadline, op->queues,
                                   engine.shape().attempt(), options.min_replicas});
  try {
    op->token = random_token();
  } catch (const std::exception&) {
    return deliver(engine.executor(), Defer::yes, std::move(op->handler),
                   error_code(error::server_error), Grant{});
  }
  // The cancellation handler is installed here, in the initiating call, on the caller's
  // thread: Asio lets a signal be emitted only where its operation was initiated and
  // completes, never concurrently with installing the handler. (Installing it later on our
  // strand raced with an emit from the caller's strand: Stress.ThreadsCancellations... under
  // TSan.) For the same reason it is cleared where the completion handler runs, just before
  // (completion.hpp's complete()), not on our strand. It holds the op weakly and nothing
  // else (no strand: a handler dropped at shutdown may be destroyed with the caller's signal
  // after the io_context).
  install_cancellation(op->handler, op);
  engine.on_strand([op = std::move(op)]() mutable { op->start(); });
}

}  // namespace

void start_op(Engine& engine, AcquireParams params, AcquireHandler handler) {
  auto& resource = params.resource;
  const auto& options = params.options;
  const auto kind = params.kind;
  if (!engine.alive()) return;  // the context is gone: drop the handler, as Asio does
  auto broken = engine.config_violation();
  if (!broken) broken = check(resource, options, engine.shape());
  if (!broken) broken = check(kind, engine.shape());
  if (broken) {
    return engine.refuse(std::move(resource), broken.error, broken.rule, std::move(handler),
                         kind.type, params.diagnostics);
  }
  auto op = std::make_shared<AcquireOp>(std::move(handler), std::move(resource), options);
  op->kind = kind.type;
  op->diagnostics = params.diagnostics;
  // A lease set's marker: its kind and limit (acquire_set.lua).
  if (kind.type == AcquireKind::permit) op->marker = "#S" + to_decimal(kind.limit);
  if (kind.type == AcquireKind::shared || kind.type == AcquireKind::exclusive) op->marker = "#RW";
  if (kind.type == AcquireKind::mutex) op->data = engine.holder_label();
  start(engine, std::move(op));
}

void start_op(Engine& engine, CampaignParams params, AcquireHandler handler) {
  auto& resource = params.resource;
  const auto& value = params.value;
  auto& options = params.options;
  if (!engine.alive()) return;  // the context is gone: drop the handler, as Asio does
  options.auto_renew = true;    // the leadership lasts while the guard is held
  auto broken = engine.config_violation();
  if (!broken) broken = check(resource, options, engine.shape());
  if (!broken) broken = check_admin(resource, engine.shape());
  if (!broken) broken = check_value(value);
  if (broken) {
    return engine.refuse(std::move(resource), broken.error, broken.rule, std::move(handler),
                         AcquireKind::election, params.diagnostics);
  }
  auto op = std::make_shared<AcquireOp>(std::move(handler), std::move(resource), options);
  op->kind = AcquireKind::election;
  op->diagnostics = params.diagnostics;
  const auto& label = engine.holder_label();
  op->data.reserve(label.size() + 1 + value.size());
  op->data.append(label).append("\n").append(value);
  start(engine, std::move(op));
}

using Action = AcquireFsm::Action;
using Kind = AcquireFsm::Action::Kind;

AcquireOp::AcquireOp(AcquireHandler h, std::string resource_name, LockOptions opts)
    : handler(std::move(h)), resource(std::move(resource_name)), options(opts) {
  wants_late = true;
}

AcquireOp::~AcquireOp() {
  // Dropped unfinished (the context shut down with our handlers queued).
  if (service) service->pending().remove(*this);
}

void AcquireOp::start() {
  // Not if a cancellation came first (it completed the op already).
  const auto first = fsm.start(Clock::now());
  if (first.kind == Action::Kind::none) return;
  service->pending().add(*this, std::static_pointer_cast<AcquireOp>(shared_from_this()));
  run(first);
}

void AcquireOp::run(Action a) {
  if (!wait_reported && fsm.waited()) {
    // Joined the queue (the event that set it came just now): said before anything else,
    // so the completion's AcquireEvent (waited) always follows it.
    wait_reported = true;
    if (auto* observer = service->observer()) observer->on_wait({resource, kind});
  }
  if (a.give_back) give_back();
  if (a.new_token) {
    // The give-back on its way releases whatever this token holds: never use it again.
    service->remove_waiter(token);
    try {
      token = random_token();
    } catch (const std::exception&) {
      return run(fsm.mint_failed());
    }
  }
  switch (a.kind) {
    case Kind::none:
      return;
    case Kind::send:
      return send_attempt();
    case Kind::listen:
      // Idempotent; again each time, it resubscribes after a lost subscriber link. A hand-off
      // message that overtook the reply is handed to us in there (a nudge the fsm keeps).
      service->add_waiter(token, std::static_pointer_cast<AcquireOp>(shared_from_this()), slot);
      return run(fsm.listened(Clock::now(), service->waiters().listening(slot)));
    case Kind::sleep:
      return sleep_until(a.until);
    case Kind::wake:
      if (timer) timer->cancel();
      return;
    case Kind::replicate:
      replicating =
          make_grant(*service, resource, token, kind, options, fsm.fence(), fsm.granted_at());
      return confirm_replicated();
    case Kind::complete:
      if (!a.grant) {
        replicating.release();  // a lease kept for WAIT that is not handed out
        return finish(a.ec, Grant{});
      }
      if (replicating) return finish(a.ec, std::move(replicating));
      return finish(a.ec, make_grant(*service, resource, token, kind, options, fsm.fence(),
                                     fsm.granted_at()));
  }
}

void AcquireOp::give_back() {
  service->give_back(resource, token, kind, fsm.give_back_until(), member_suffix);
}

std::optional<QuorumAcquire> AcquireOp::quorum_acquire() {
  QuorumAcquire q;
  q.lease_token = token;
  q.fence_key = keys.fence();
  q.ttl = options.ttl;
  q.attempt_started = fsm.attempt_started();
  q.give_back = [service = service, resource = resource, token = token,
                 until = fsm.give_back_until()](std::size_t master) {
    give_back_on(*service, master, resource, token, until);
  };
  return q;
}

void AcquireOp::send_attempt() {
  sent_body = false;
  patience = deadline;
  if (member_suffix.empty()) {
    // Redlock waits by backing off: a fair queue on each master would not be one queue.
    // A plain mutex's waiter that can own a lease on a signed message (no WAIT to confirm
    // it with, not an election's candidate, whose record stays beside the lease) queues
    // with a secret of its own for the release to sign with: the one-hop hand-off.
    if (queues && kind == AcquireKind::mutex && options.min_replicas == 0 &&
        sign_hand_offs.load(std::memory_order_relaxed)) {
      try {
        secret = random_token();
      } catch (const std::exception&) {
        // No entropy now: no secret, and hand-offs are claimed.
      }
    }
    member_suffix.reserve(16 + 1 + secret.size() + 20 + (data.empty() ? 0 : 1 + data.size()));
    const char letter = is_lease_set(kind) ? mode_letter(kind)
                        : secret.empty()   ? folded_member_letter
                                           : signed_member_letter;
    service->waiters().append_member_suffix(member_suffix, options.ttl, letter, data, secret);
    if (kind == AcquireKind::election) announce = service->announce_of(resource);
  }
  // After a hand-off message, the lease is likely ours to claim: acquire.lua reads it first.
  using Mode = scripts::Acquire::Mode;
  const Mode mode = service->shape().attempt() == Attempt::vote ? Mode::redlock
                    : !queues                                   ? Mode::alone
                    : claim_expected                            ? Mode::claim
                                                                : Mode::queue;
  claim_expected = false;
  if (is_lease_set(kind)) {
    set(scripts::AcquireSet{.lease = keys.lease(),
                            .fence = keys.fence(),
                            .queue = keys.queue(),
                            .queue_expiry = keys.queue_expiry(),
                            .mutex_queue = mutex_queue,
                            .token = token,
                            .ttl_ms = ttl_ms,
                            .joins = queues,
                            .place_ms = waiter_ttl_ms,
                            .member_suffix = member_suffix,
                            .marker = marker});
  } else {
    set(scripts::Acquire{.lease = keys.lease(),
                         .fence = keys.fence(),
                         .queue = keys.queue(),
                         .queue_expiry = keys.queue_expiry(),
                         // No info without the shape's (Redlock: each master's fencing token is its
                         // own, the quorum's is their maximum).
                         .info = service->shape().keeps_info() ? scripts::Optional(keys.info())
                                                               : scripts::Optional(),
                         .token = token,
                         .ttl_ms = ttl_ms,
                         .mode = mode,
                         .place_ms = waiter_ttl_ms,
                         .member_suffix = member_suffix,
                         .announce = kind == AcquireKind::election ? scripts::Optional(announce)
                                                                   : scripts::Optional()});
  }
  service->send(std::static_pointer_cast<ScriptOp>(shared_from_this()));
}

void AcquireOp::cancel() { run(fsm.cancel()); }

void AcquireOp::last_words() noexcept {
  using Phase = AcquireFsm::Phase;
  const auto phase = fsm.phase();
  if (phase == Phase::done || phase == Phase::starting) return;
  // An attempt in flight may have queued us (or taken the lease a release handed us).
  // (An overdue attempt's link is given up for its timeout: nothing written now goes behind
  // it, so its give-back goes the usual way.)
  const bool in_flight = phase == Phase::attempting;
  if (!fsm.in_queue() && !((in_flight || phase == Phase::overdue) && queues)) return;
  // Behind the attempt in flight, on its connection: elsewhere the give-back could reach
  // the server first, and the attempt queue us after it.
  const auto pool = durable ? Router::Pool::durable : Router::Pool::commands;
  service->give_back_now(node, in_flight ? std::optional(pool) : std::nullopt, resource, token,
                         kind, member_suffix);
}

void AcquireOp::nudge() { run(fsm.nudge()); }

void AcquireOp::handed(const HandOff& hand_off) {
  // An unsigned hand-off message is a nudge, never a grant: anyone who may publish on the
  // lock's channels could send "<token> <fencing token> <place>"; taken at its word, it
  // granted the waiter the lock, with the sender's token, while the real holder still held
  // it. The attempt it prompts claims the lease the release set for us (acquire.lua), and
  // the server's answer says what we hold and with which token. A message signed with our
  // secret (which only we and the server's keys know) is the release's own: it grants, with
  // no claim (AcquireFsm::handed says when).
  if (!secret.empty() && !hand_off.mac.empty() &&
      equal_in_constant_time(hand_off_mac(secret, hand_off.signed_by), hand_off.mac)) {
    claim_expected = true;  // if it is only a nudge after all
    return run(fsm.handed(Clock::now(), static_cast<long long>(hand_off.fence), hand_off.place));
  }
  claim_expected = !is_lease_set(kind) && service->shape().queues();
  nudge();
}

void AcquireOp::on_late_reply(error_code ec, const Reply& reply) {
  if (fsm.phase() == AcquireFsm::Phase::overdue) {
    // The wait rode the timeout out: the reply decides as if it had come on time. One the
    // router would have resent never ran: the next attempt goes the router's way.
    if (!ec && reply.is_error() &&
        (redirect::read(reply.str).kind != redirect::Action::Kind::none ||
         library_lost(reply.str))) {
      return run(fsm.resend_late(Clock::now()));
    }
    return on_reply(ec, reply);
  }
  // The attempt timed out but may have run: give back what it took (or the place it
  // queued for).
  if (AcquireFsm::give_back_late(ec, reply.is_error(), !ec && replies::may_have_granted(reply),
                                 options.wait.count() > 0)) {
    give_back();
  }
}

void AcquireOp::on_reply(error_code ec, Reply reply) {
  const auto now = Clock::now();
  if (ec) return run(fsm.failed(now, ec));
  if (reply.is_error()) {
    error_detail = reply.str;
    return run(fsm.refused(service->server_error(reply)));
  }
  const auto read = replies::read_acquire(reply);
  switch (read.kind) {
    case replies::Acquire::Kind::malformed:
      return run(fsm.malformed());
    case replies::Acquire::Kind::granted:
      return run(fsm.granted(now, read.value));
    case replies::Acquire::Kind::held:
      return run(fsm.held(now, read.value, read.place));
  }
}

Grant make_grant(Engine& service, const std::string& resource, const std::string& token,
                 AcquireKind kind, const LockOptions& options, long long fence,
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
  return Grant(service.shared_from_this(), resource, token, static_cast<std::uint64_t>(fence),
               std::move(lease));
}

void AcquireOp::confirm_replicated() {
  // WAIT on the connection that carried the acquire: it counts the replicas that have
  // everything written on it so far, our SET included.
  service->confirm_replicas(
      node, options.min_replicas, options.replication_timeout,
      Engine::Confirmed([op = std::static_pointer_cast<AcquireOp>(shared_from_this())](
                            error_code ec, std::string_view detail) {
        if (!detail.empty()) op->error_detail = detail;
        op->run(op->fsm.replicated(ec));
      }));
}

void AcquireOp::sleep_until(Clock::time_point until) {
  if (!timer) timer = std::make_unique<asio::steady_timer>(service->strand());
  // A wait still pending (an overdue attempt's deadline, when its late reply came first) is
  // cancelled by expires_at: its handler must not take that for a wake.
  const auto armed = ++timer_armed;
  timer->expires_at(until);
  timer->async_wait(
      [op = std::static_pointer_cast<AcquireOp>(shared_from_this()), armed](error_code) {
        if (armed != op->timer_armed) return;
        op->run(op->fsm.timer_fired(Clock::now()));
      });
}

void AcquireOp::finish(error_code ec, Grant grant) {
  service->pending().remove(*this);
  if (timer) timer->cancel();
  if (auto* observer = service->observer()) report(*observer, ec, grant);
  service->remove_waiter(token);
  tell(diagnostics, ec, error_detail);
  deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(grant));
}

void AcquireOp::report(Observer& observer, error_code ec, const Grant& grant) const noexcept {
  const auto now = Clock::now();
  AcquireEvent e{resource,
                 AcquireOutcome::acquired,
                 ec,
                 now - called,
                 fsm.attempts(),
                 fsm.waited(),
                 grant.fence,
                 node_results,
                 error_detail,
                 kind};
  if (ec == asio::error::operation_aborted) {
    e.outcome = AcquireOutcome::cancelled;
  } else if (ec) {
    e.outcome = AcquireOutcome::failed;
  } else if (!grant) {
    e.outcome = AcquireOutcome::not_acquired;
  } else {
    mark_held(*grant.lease, now);
  }
  observer.on_acquire(e);
}

}  // namespace redis_lock::detail

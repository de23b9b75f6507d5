// SPDX-License-Identifier: MIT
// Layer 5 (public API): RunOp, one run (or one reconciler's look at one key), and the store's
// checks before a component's first call (idempotency_op.hpp).
#include "idempotency_op.hpp"

#include "idempotency_run.hpp"
#include "idempotency_store.hpp"

#include <redis_lock/error.hpp>
#include <redis_lock/idempotency.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using idempotency::Action;
using idempotency::Step;
using idempotency::StoreReply;

void RunOp::act(Action a) {
  const auto& key = fsm.key();
  const auto& o = shared->options;
  const auto& s = fsm.settings();
  switch (a.step) {
    case Step::look:
      return calls().look(key, then([](RunOp& op, error_code ec, const StoreReply& r) {
                            op.act(op.fsm.looked(ec, r));
                          }));
    case Step::lock: {
      LockOptions lock;
      lock.ttl = o.lease;
      lock.wait = s.reconcile ? std::chrono::milliseconds(0) : o.wait;
      lock.auto_renew = o.max_hold.count() > 0;
      lock.max_hold = o.max_hold;
      detail::initiate<detail::AcquireParams>(shared->io, shared->alive)(
          asio::bind_executor(strand,
                              [self = shared_from_this()](error_code ec, LockGuard g) {
                                const bool held = g.owns_lock();
                                const auto fence = g.fencing_token();
                                self->guard = std::move(g);
                                if (held) self->watch_lease();
                                self->act(self->fsm.locked(ec, held, fence));
                              }),
          shared->locks, detail::AcquireParams{o.lock_prefix + key, lock, {}});
      return;
    }
    case Step::begin:
      return calls().begin(
          key, fsm.fingerprint(), fsm.fence(), s.first_look_ms, s.reconcile, s.resend,
          fsm.payload(),
          then([](RunOp& op, error_code ec, const StoreReply& r) { op.act(op.fsm.begun(ec, r)); }));
    case Step::work:
      return ask(false);
    case Step::resolve:
      return ask(true);
    case Step::decide: {
      const auto& r = fsm.response();
      return calls().decide(key, fsm.fingerprint(), fsm.attempt(), fsm.downstream_key(), r.status,
                            r.body, r.external_id, o.retention.count(),
                            then([](RunOp& op, error_code ec, const StoreReply& reply) {
                              op.act(op.fsm.stored(ec, reply));
                            }));
    }
    case Step::void_:
      return calls().void_attempt(key, fsm.downstream_key(), fsm.fence(),
                                  then([](RunOp& op, error_code ec, const StoreReply& r) {
                                    op.act(op.fsm.stored(ec, r));
                                  }));
    case Step::next:
      return calls().next(key, fsm.downstream_key(), fsm.fence(), s.first_look_ms,
                          then([](RunOp& op, error_code ec, const StoreReply& r) {
                            op.act(op.fsm.stored(ec, r));
                          }));
    case Step::defer:
      return calls().defer(key, fsm.downstream_key(), fsm.fence(), s.first_look_ms, s.look_cap_ms,
                           then([](RunOp& op, error_code ec, const StoreReply& r) {
                             op.act(op.fsm.stored(ec, r));
                           }));
    case Step::escalate:
      return calls().escalate(key, fsm.downstream_key(), fsm.fence(), s.escalate_after_ms,
                              then([](RunOp& op, error_code ec, const StoreReply& r) {
                                op.act(op.fsm.stored(ec, r));
                              }));
    case Step::finish:
      return finish();
  }
}

void RunOp::ask(bool resolving) {
  const auto& function = resolving ? shared->resolve : work;
  Attempt attempt;
  attempt.key = fsm.key();
  attempt.number = fsm.attempt();
  attempt.downstream_key = fsm.downstream_key();
  attempt.fencing_token = fsm.fence();
  attempt.began = std::chrono::system_clock::time_point(std::chrono::milliseconds(fsm.began_ms()));
  if (fsm.payload()) attempt.payload = *fsm.payload();
  attempt.deadline = deadline();
  if (!resolving && function && works >= max_sends) {
    // Sent enough times in this run (each answer sent it round again): the attempt is left
    // running, unsent, for a later look, whose resolve finds it unsent (a backoff, not a
    // burst at the downstream).
    return act(fsm.learnt(AttemptOutcome::unknown()));
  }
  if (std::chrono::steady_clock::now() >= cutoff() || !function) {
    // No time left to send anything (the deadline, or the lease lost or about to lapse
    // unrenewed), or nothing to ask: an unsent work did not happen; an unasked resolve
    // learnt nothing.
    return act(fsm.learnt(resolving ? AttemptOutcome::unknown() : AttemptOutcome::not_executed()));
  }
  ++(resolving ? resolves : works);
  signal = std::make_shared<asio::cancellation_signal>();
  attempt.cancellation = signal->slot();
  attempt.executor = strand;
  const auto which = std::make_shared<Asked>();
  asked = which;
  timer.emplace(strand);
  arm(which);
  // The handler holds the op weakly: an answer that never comes must not keep it (and its
  // timer and strand) alive past the io_context. One that comes once the op is gone (the
  // lease ended) still records a decision for its attempt's key.
  auto late = std::make_shared<LateAnswer>(
      LateAnswer{shared, fsm.key(), fsm.fingerprint(), fsm.attempt(), fsm.downstream_key()});
  function(attempt, [weak = weak_from_this(), which, late](AttemptOutcome outcome) {
    if (!late->shared->alive->load()) return;  // the context shut down: dropped
    if (auto self = weak.lock()) {
      asio::post(self->strand, [self, which, outcome = std::move(outcome)]() mutable {
        self->answer(which, std::move(outcome));
      });
    } else {
      late->record(outcome, [](error_code, StoreReply) {});
    }
  });
}

std::chrono::steady_clock::time_point RunOp::deadline() const {
  const auto& o = shared->options;
  if (o.max_hold.count() > 0) return locked_at + o.max_hold - o.margin;
  return guard.valid_until() - o.margin;
}

std::chrono::steady_clock::time_point RunOp::cutoff() const {
  // With max_hold the lease is renewed: while renewals succeed its validity stays ahead of
  // the deadline; one that lapses unrenewed (or is lost) comes first, less the margin.
  if (guard.lost()) return std::chrono::steady_clock::time_point::min();
  return std::min(deadline(), guard.valid_until() - shared->options.margin);
}

void RunOp::arm(const std::shared_ptr<Asked>& which) {
  timer->expires_at(cutoff());
  timer->async_wait([self = shared_from_this(), which](error_code ec) {
    if (ec || *which != Asked::waiting) return;
    // A renewal moved the lease's validity on since: wait for the new cutoff.
    if (std::chrono::steady_clock::now() < self->cutoff()) return self->arm(which);
    self->expire(which);
  });
}

void RunOp::expire(const std::shared_ptr<Asked>& which) {
  if (*which != Asked::waiting) return;
  // The deadline (or the renewed lease was lost): the attempt's outcome is unknown (it may
  // have been sent). The caller is told pending; the lock stays held until the answer or
  // the lease's end, so that nobody resolves the attempt while it may still be on its way.
  // Its answer, if it comes, is recorded if it is a decision (answer()).
  *which = Asked::timed_out;
  timed_out = true;
  signal->emit(asio::cancellation_type::terminal);
  act(fsm.learnt(AttemptOutcome::unknown()));
}

void RunOp::watch_lease() {
  locked_at = guard.valid_until() - shared->options.lease;
  if (shared->options.max_hold.count() == 0) return;
  // A renewed lease that is lost ends the attempt being asked as its deadline would (the
  // guard's own signal: the lease may be another holder's from now on).
  // Held weakly (the guard's waiter would otherwise hold the op that holds the guard, past
  // the io_context's end): while an attempt is out, its timer keeps the op.
  guard.async_wait_lost(asio::bind_executor(strand, [weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (!self || ec != error::lock_lost) return;  // released (operation_aborted), shut down
    if (!self->asked) return;
    if (*self->asked == Asked::waiting) return self->expire(self->asked);
    // Held past a timed-out attempt: the lease is gone, nothing is left to keep.
    if (*self->asked == Asked::timed_out && self->hold_timer) self->let_go();
  }));
}

void LateAnswer::record(const AttemptOutcome& outcome,
                        detail::idempotency::StoreHandler done) const {
  const auto& r = outcome.response;
  if (outcome.kind != AttemptOutcome::Kind::decided ||
      r.body.size() + r.external_id.size() > shared->options.max_response_bytes) {
    return done({}, StoreReply{});
  }
  // Keyed, not fenced: recorded if that attempt is still the live one, refused otherwise.
  shared->calls->decide(key, fingerprint, attempt, downstream_key, r.status, r.body, r.external_id,
                        shared->options.retention.count(), std::move(done));
}

void RunOp::answer(const std::shared_ptr<Asked>& which, AttemptOutcome outcome) {
  if (*which == Asked::answered) return;  // (an AttemptHandler called twice)
  if (*which == Asked::timed_out) {
    *which = Asked::answered;
    // After the deadline: the caller was told pending. A decision is recorded, then the lock
    // (still held, if the lease has not ended) is let go.
    const LateAnswer late{shared, fsm.key(), fsm.fingerprint(), fsm.attempt(),
                          fsm.downstream_key()};
    return late.record(outcome,
                       then([](RunOp& op, error_code, const StoreReply&) { op.let_go(); }));
  }
  *which = Asked::answered;
  timer->cancel();
  const auto& o = shared->options;
  if (outcome.kind == AttemptOutcome::Kind::decided &&
      outcome.response.body.size() + outcome.response.external_id.size() > o.max_response_bytes) {
    // Not recorded half-way: the attempt stays unknown (a resolve may answer it smaller).
    override_error = error::invalid_argument;
    outcome = AttemptOutcome::unknown();
  }
  act(fsm.learnt(outcome));
}

void RunOp::let_go() {
  hold_timer.reset();
  timer.reset();
  if (!guard.owns_lock()) return;
  guard.async_release(
      asio::bind_executor(strand, [self = shared_from_this()](error_code, bool) {}));
}

void RunOp::finish() {
  auto complete = [self = shared_from_this()]() {
    auto ec = self->override_error ? self->override_error : self->fsm.error();
    self->report(ec);
    auto d = std::move(self->done);
    if (d) d(ec, ec ? RunResult{} : self->fsm.result());
  };
  if (asked && *asked == Asked::timed_out && guard.owns_lock()) {
    // The attempt may still be on its way: the caller is told now, the lock is kept until
    // its answer (answer()) or the lease's end: with max_hold the last renewal may carry it
    // a lease past max_hold, and a lease lost before lets go at once (watch_lease).
    const auto& o = shared->options;
    if (guard.lost()) {
      let_go();
      return complete();
    }
    hold_timer.emplace(
        strand, o.max_hold.count() > 0 ? locked_at + o.max_hold + o.lease : guard.valid_until());
    hold_timer->async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->let_go();
    });
    return complete();
  }
  timer.reset();
  if (!guard.owns_lock()) return complete();
  guard.async_release(asio::bind_executor(
      strand, [complete = std::move(complete)](error_code, bool) mutable { complete(); }));
}

void ensure_store(const std::shared_ptr<detail::IdempotencyShared>& shared,
                  std::function<void(error_code)> then) {
  auto& s = *shared;
  if (s.store_checked.load()) return then({});
  auto check = std::make_shared<detail::IdempotencyShared::Check>();
  {
    std::unique_lock lock(s.mutex);
    if (s.refused && std::chrono::steady_clock::now() < s.refused_until) {
      const auto why = s.refused;
      lock.unlock();
      return then(why);
    }
    if (auto out = s.in_flight.lock()) {
      out->waiting.push_back(std::move(then));  // its answer is this call's
      return;
    }
    check->waiting.push_back(std::move(then));
    s.in_flight = check;
  }
  auto finish = [shared, check](error_code why, std::string text) {
    auto& c = *shared;
    std::vector<std::function<void(error_code)>> waiting;
    {
      std::lock_guard lock(c.mutex);
      c.store_problem = std::move(text);
      const bool configuration = why == error::store_not_durable ||
                                 why == error::invalid_argument || why == error::no_permission;
      c.refused = configuration ? why : error_code{};
      c.refused_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      if (!why) c.store_checked.store(true);
      waiting.swap(check->waiting);
      c.in_flight.reset();
    }
    for (auto& w : waiting) w(why);
  };
  s.calls->check_shards([shared, finish](error_code ec, std::string wrong) {
    if (ec) return finish(ec, "the store's shard count could not be read: " + ec.message());
    if (!wrong.empty()) return finish(error::invalid_argument, std::move(wrong));
    const auto& o = shared->options;
    if (o.unchecked_store && o.store_replicas == 0) return finish({}, {});
    shared->calls->check_durability(
        !o.unchecked_store, o.store_replicas,
        [finish](error_code ec2, std::vector<std::string> missing) {
          if (ec2) {
            return finish(ec2, std::string("the store's settings could not be read (CONFIG GET ") +
                                   "or INFO replication: " + ec2.message() +
                                   "); grant +config|get (or set unchecked_store) and, with "
                                   "store_replicas, +info");
          }
          std::string text;
          for (const auto& m : missing) text.append(text.empty() ? "" : "; ").append(m);
          finish(missing.empty() ? error_code{} : error_code(error::store_not_durable),
                 std::move(text));
        });
  });
}

void start_run(const std::shared_ptr<RunOp>& op) {
  ensure_store(op->shared, [op](error_code ec) {
    asio::post(op->strand, [op, ec] {
      if (!ec) return op->act(op->fsm.start());
      op->report(ec);
      op->done(ec, RunResult{});
    });
  });
}

}  // namespace redis_lock::detail

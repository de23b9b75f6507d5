// SPDX-License-Identifier: MIT
// Layer 5 (public API): IdempotentRequests, the driver of RunFsm (idempotency_run.hpp): it
// does what each Action says (a store script, the key's lock, the caller's work or resolve)
// on a strand of its own and feeds the answer back.
#include <redis_lock/idempotency.hpp>

#include "completion.hpp"
#include "idempotency_run.hpp"
#include "idempotency_store.hpp"
#include "lock_service.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <charconv>
#include <mutex>

namespace redis_lock {

namespace asio = boost::asio;
using boost::system::error_code;
using detail::idempotency::Action;
using detail::idempotency::RunFsm;
using detail::idempotency::RunSettings;
using detail::idempotency::Step;
using detail::idempotency::StoreReply;

const char* run_result_name(RunResult::Kind kind) noexcept {
  switch (kind) {
    case RunResult::Kind::executed:
      return "executed";
    case RunResult::Kind::replayed:
      return "replayed";
    case RunResult::Kind::busy:
      return "busy";
    case RunResult::Kind::mismatch:
      return "mismatch";
    case RunResult::Kind::pending:
      return "pending";
    case RunResult::Kind::not_executed:
      return "not_executed";
    case RunResult::Kind::escalated:
      return "escalated";
    case RunResult::Kind::absent:
      return "absent";
  }
  return "unknown";
}

const char* request_state_name(RequestRecord::State state) noexcept {
  switch (state) {
    case RequestRecord::State::none:
      return "none";
    case RequestRecord::State::running:
      return "running";
    case RequestRecord::State::unsent:
      return "unsent";
    case RequestRecord::State::decided:
      return "decided";
    case RequestRecord::State::escalated:
      return "escalated";
  }
  return "unknown";
}

struct detail::IdempotencyShared {
  std::shared_ptr<detail::LockService> locks;
  asio::any_io_executor io;  // the locks' manager's: completions default to it
  detail::ContextAlive alive;
  std::shared_ptr<detail::LockService> store;
  std::optional<detail::idempotency::StoreCalls> calls;
  AttemptFunction resolve;
  IdempotencyOptions options;
  bool options_ok = true;
  std::atomic<bool> store_checked{false};
  mutable std::mutex mutex;
  std::string store_problem;  // under mutex
  // A failed check is kept a second (under mutex): a refused store is not asked again by
  // every run (a CONFIG GET per shard each).
  error_code refused;
  std::chrono::steady_clock::time_point refused_until;
  // The check in flight and who waits for its answer (one check at a time, however many
  // calls arrive before it answers). Owned by the check's own store calls, so that a check
  // dropped at shutdown drops its waiters (as Asio drops handlers), and only watched here:
  // a waiter holds this object.
  struct Check {
    std::vector<std::function<void(error_code)>> waiting;  // under mutex
  };
  std::weak_ptr<Check> in_flight;  // under mutex

  RunSettings settings(bool reconcile, bool resend = false) const {
    RunSettings s;
    s.reconcile = reconcile;
    s.resend = resend;
    s.resend_unsent = options.resend_unsent;
    const auto first = options.first_look.count() > 0 ? options.first_look : options.lease;
    s.first_look_ms = first.count();
    s.look_cap_ms = std::max(options.look_cap, first).count();
    s.escalate_after_ms = options.escalate_after.count();
    return s;
  }
};

namespace {

using Done = std::function<void(error_code, RunResult)>;

/// Where an attempt's answer stands (on the op's strand).
enum class Asked { waiting, answered, timed_out };

/// What recording a late answer needs, without the op.
struct LateAnswer {
  std::shared_ptr<detail::IdempotencyShared> shared;
  std::string key;
  std::string fingerprint;
  std::uint32_t attempt;
  std::string downstream_key;
  void record(const AttemptOutcome& outcome, detail::idempotency::StoreHandler done) const;
};

/// One run (or one reconciler's look at one key): RunFsm's driver, on a strand of its own.
struct RunOp : std::enable_shared_from_this<RunOp> {
  /// `w`: the request's work, or the reconciler's resend (none: it sends nothing).
  RunOp(std::shared_ptr<detail::IdempotencyShared> s, std::string key, std::string fingerprint,
        AttemptFunction w, bool reconcile, Done d,
        std::optional<std::string> payload = std::nullopt)
      : shared(std::move(s)),
        fsm(std::move(key), std::move(fingerprint),
            shared->settings(reconcile, reconcile && static_cast<bool>(w)), std::move(payload)),
        work(std::move(w)),
        done(std::move(d)),
        strand(asio::make_strand(shared->io)) {}

  std::shared_ptr<detail::IdempotencyShared> shared;
  RunFsm fsm;
  AttemptFunction work;  // the reconciler's: its resend, or none
  Done done;
  asio::strand<asio::any_io_executor> strand;
  LockGuard guard;
  // When the key's lock was taken (its lease's start, as the guard counts it): with
  // max_hold, an attempt's deadline and the longest the lock is kept are counted from it.
  std::chrono::steady_clock::time_point locked_at;
  std::optional<asio::steady_timer> timer;       // the attempt's deadline
  std::optional<asio::steady_timer> hold_timer;  // the lease's end, past a deadline
  std::shared_ptr<asio::cancellation_signal> signal;
  std::shared_ptr<Asked> asked;  // the current attempt's
  error_code override_error;     // a decided response over the bound
  // For the observer.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int works = 0;
  int resolves = 0;
  bool timed_out = false;

  auto& calls() { return *shared->calls; }

  /// `f(*this, args...)` on the strand, for a store's reply.
  template <class F>
  auto then(F f) {
    return [self = shared_from_this(), f](error_code ec, StoreReply reply) {
      asio::post(self->strand, [self, f, ec, reply = std::move(reply)]() { f(*self, ec, reply); });
    };
  }

  void act(Action a);
  void ask(bool resolving);
  void answer(const std::shared_ptr<Asked>& which, AttemptOutcome outcome);
  void expire(const std::shared_ptr<Asked>& which);
  void arm(const std::shared_ptr<Asked>& which);
  /// The deadline the work is told (with max_hold: from the lock's start).
  std::chrono::steady_clock::time_point deadline() const;
  /// When the attempt ends: its deadline, or earlier the lease's validity less the margin
  /// (a renewed lease that stops being renewed), at once once the lease is lost.
  std::chrono::steady_clock::time_point cutoff() const;
  /// A run sends at most this many attempts (a resend that says the key was spent, a
  /// resolve that then says nothing happened, ...): then it defers to a later look.
  static constexpr int max_sends = 3;
  void let_go();
  void watch_lease();
  void finish();
  void report(error_code ec);
};

void RunOp::report(error_code ec) {
  auto& locks = *shared->locks;
  if (!locks.observer() || !locks.alive()) return;
  IdempotencyEvent e{};
  e.reconciler = fsm.settings().reconcile;
  if (!ec && fsm.result().kind == RunResult::Kind::pending) {
    e.looks = fsm.result().looks;
    e.retry_after = fsm.result().retry_after;
  }
  e.result = fsm.result().kind;
  e.error = ec;
  e.attempt = ec ? fsm.attempt() : fsm.result().attempt;
  e.works = works;
  e.resolves = resolves;
  e.timed_out = timed_out;
  e.latency = std::chrono::steady_clock::now() - started;
  // On the lock manager's strand, as its own events (one call at a time per manager).
  locks.on_strand([service = shared->locks, e, key = fsm.key(),
                   resource = shared->options.lock_prefix + fsm.key()]() mutable {
    if (auto* observer = service->observer()) {
      e.key = key;
      e.resource = resource;
      observer->on_idempotency(e);
    }
  });
}

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
      detail::initiate_acquire(shared->io, shared->alive)(
          asio::bind_executor(strand,
                              [self = shared_from_this()](error_code ec, LockGuard g) {
                                const bool held = g.owns_lock();
                                const auto fence = g.fencing_token();
                                self->guard = std::move(g);
                                if (held) self->watch_lease();
                                self->act(self->fsm.locked(ec, held, fence));
                              }),
          shared->locks, o.lock_prefix + key, lock);
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

/// The store's checks, before a component's first call (a run, a reconciler's round, an
/// operator's listing or decision): its shard count (always) and its durability (unless
/// unchecked). `then(error)` is called once, from any thread: at once when the store passed
/// before, else when the check in flight answers (one check at a time, shared by the calls
/// that arrive meanwhile). A refusal of the store's configuration (not durable, another
/// shard count, no permission to read it) is kept a second, so that a misconfigured store
/// is not asked again by every call; a passing failure (out of memory, a lost link) is not
/// kept.
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

/// A request key a call may name: 1..max_key_bytes, no '/' (downstream keys `<key>/<n>` of
/// `A-1` and `A-10` must stay apart), on a component whose options are valid.
bool valid_key(const detail::IdempotencyShared& shared, const std::string& key) {
  return shared.options_ok && !key.empty() && key.size() <= shared.options.max_key_bytes &&
         key.find('/') == std::string::npos;
}

bool valid_options(const IdempotencyOptions& o) {
  return o.lease > o.margin && o.margin.count() >= 0 && o.wait.count() >= 0 &&
         o.retention.count() >= 0 && o.first_look.count() >= 0 && o.look_cap.count() > 0 &&
         o.escalate_after.count() > 0 && o.max_key_bytes > 0 && o.shards >= 1 && o.shards <= 1024 &&
         !o.lock_prefix.empty() && o.store_replicas >= 0 &&
         (o.max_hold.count() == 0 || o.max_hold > o.margin) && o.max_hold.count() >= 0 &&
         (o.store_replicas == 0 || o.store_replication_timeout.count() > 0);
}

}  // namespace

IdempotentRequests::IdempotentRequests(LockManager& locks, LockManager& store,
                                       AttemptFunction resolve, IdempotencyOptions options)
    : shared_(std::make_shared<Shared>()) {
  auto& s = *shared_;
  s.locks = locks.service_;
  s.io = locks.executor_;
  s.alive = locks.context_alive_;
  s.store = store.service_;
  s.resolve = std::move(resolve);
  s.options = std::move(options);
  s.options_ok = valid_options(s.options) && s.locks && s.store && !s.store->redlock();
  if (s.store) {
    s.calls.emplace(s.store, s.options.shards,
                    detail::idempotency::Replicas{s.options.store_replicas,
                                                  s.options.store_replication_timeout});
  }
}

IdempotentRequests::IdempotentRequests(LockManager& locks, AttemptFunction resolve,
                                       IdempotencyOptions options)
    : IdempotentRequests(locks, locks, std::move(resolve), std::move(options)) {}

IdempotentRequests::~IdempotentRequests() = default;

std::string IdempotentRequests::store_problem() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->store_problem;
}

void IdempotentRequests::run_impl(std::shared_ptr<Shared> shared, std::string key,
                                  std::string fingerprint, AttemptFunction work, RunHandler handler,
                                  std::optional<std::string> payload) {
  const auto& o = shared->options;
  const bool bad = !valid_key(*shared, key) || fingerprint.size() > o.max_fingerprint_bytes ||
                   !work || (payload && payload->size() > o.max_payload_bytes) ||
                   (payload && o.max_payload_bytes == 0);
  const auto io = shared->io;
  if (bad) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), RunResult{});
  }
  auto h = std::make_shared<RunHandler>(std::move(handler));
  auto op = std::make_shared<RunOp>(
      std::move(shared), std::move(key), std::move(fingerprint), std::move(work), false,
      [io, h](error_code ec, RunResult result) {
        detail::deliver(io, detail::Defer::no, std::move(*h), ec, std::move(result));
      },
      std::move(payload));
  start_run(op);
}

namespace {

/// One reconciler's round: the shards one after the other, each shard's due keys one after
/// the other (a round is background work: it need not be fast, only never overlap itself
/// on a key, which the key's lock ensures across processes anyway).
struct Round : std::enable_shared_from_this<Round> {
  std::shared_ptr<detail::IdempotencyShared> shared;
  std::function<void(error_code, ReconcileReport)> done;
  AttemptFunction resend;  // none: the round sends nothing
  ReconcileReport report;
  error_code first_error;
  unsigned shard = 0;
  std::vector<std::string> keys;
  std::size_t at = 0;

  void next_shard() {
    if (shard == shared->options.shards) return done(first_error, report);
    // Claimed for a first look's time: a key this round cannot settle (held by a request, a
    // failure) comes back after it, and lets the keys behind it through meanwhile.
    shared->calls->due(
        shard++, 256, shared->settings(true).first_look_ms,
        [self = shared_from_this()](error_code ec, detail::idempotency::DueKeys due) {
          if (ec && !self->first_error) self->first_error = ec;
          self->keys = std::move(due.keys);
          self->at = 0;
          self->next_key();
        });
  }
  void next_key() {
    if (at == keys.size()) return next_shard();
    auto op = std::make_shared<RunOp>(shared, keys[at++], std::string(), resend, true, Done{});
    // (Called from the op's own completion: `look` is alive.)
    op->done = [self = shared_from_this(), look = op.get()](error_code ec, RunResult r) {
      auto& rep = self->report;
      ++rep.looked;
      rep.sent += static_cast<std::size_t>(look->works);
      if (ec) {
        ++rep.failed;
      } else {
        switch (r.kind) {
          case RunResult::Kind::executed:
          case RunResult::Kind::replayed:
            ++rep.decided;
            break;
          case RunResult::Kind::not_executed:
          case RunResult::Kind::absent:
            ++rep.voided;
            break;
          case RunResult::Kind::pending:
            ++rep.pending;
            break;
          case RunResult::Kind::escalated:
            ++rep.escalated;
            break;
          case RunResult::Kind::busy:
          case RunResult::Kind::mismatch:
            ++rep.busy;
            break;
        }
      }
      self->next_key();
    };
    asio::post(op->strand, [op] { op->act(op->fsm.start()); });
  }
};

}  // namespace

void IdempotentRequests::escalated_impl(std::shared_ptr<Shared> shared, KeysHandler handler) {
  const auto io = shared->io;
  if (!shared->options_ok) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), std::vector<std::string>{});
  }
  struct Listing {
    std::shared_ptr<Shared> shared;
    std::shared_ptr<KeysHandler> handler;
    std::vector<std::string> keys;
    error_code first_error;
    unsigned left = 0;
  };
  auto listing = std::make_shared<Listing>();
  listing->handler = std::make_shared<KeysHandler>(std::move(handler));
  listing->left = shared->options.shards;
  listing->shared = shared;
  ensure_store(shared, [listing](error_code checked) {
    const auto& it = listing->shared;
    if (checked) {
      // (Deferred: a refusal kept from before answers from inside the initiating call.)
      return detail::deliver(it->io, detail::Defer::yes, std::move(*listing->handler), checked,
                             std::vector<std::string>{});
    }
    // Every shard at once; the answers come on the store's strand, one at a time.
    for (unsigned shard = 0; shard < it->options.shards; ++shard) {
      it->calls->escalated(shard, 1000, [listing](error_code ec, detail::idempotency::DueKeys in) {
        if (ec && !listing->first_error) listing->first_error = ec;
        for (auto& k : in.keys) listing->keys.push_back(std::move(k));
        if (--listing->left > 0) return;
        auto keys = listing->first_error ? std::vector<std::string>{} : std::move(listing->keys);
        detail::deliver(listing->shared->io, detail::Defer::no, std::move(*listing->handler),
                        listing->first_error, std::move(keys));
      });
    }
  });
}

void IdempotentRequests::settle_impl(std::shared_ptr<Shared> shared, std::string key,
                                     std::optional<StoredResponse> response,
                                     OperatorHandler handler) {
  const auto& o = shared->options;
  const auto io = shared->io;
  const bool bad =
      !valid_key(*shared, key) ||
      (response && response->body.size() + response->external_id.size() > o.max_response_bytes);
  if (bad) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), false);
  }
  auto h = std::make_shared<OperatorHandler>(std::move(handler));
  ensure_store(shared, [shared, key = std::move(key), response = std::move(response), io,
                        h](error_code checked) mutable {
    auto done = [io, h](error_code ec, StoreReply reply) {
      detail::deliver(io, detail::Defer::no, std::move(*h), ec, !ec && reply.word == "done");
    };
    if (checked) {
      // (Deferred: a refusal kept from before answers from inside the initiating call.)
      return detail::deliver(io, detail::Defer::yes, std::move(*h), checked, false);
    }
    if (response) {
      return shared->calls->settle(key, response->status, response->body, response->external_id,
                                   shared->options.retention.count(), std::move(done));
    }
    shared->calls->reopen(key, std::move(done));
  });
}

void IdempotentRequests::check_impl(std::shared_ptr<Shared> shared, CheckHandler handler) {
  const auto io = shared->io;
  if (!shared->options_ok) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument));
  }
  auto h = std::make_shared<CheckHandler>(std::move(handler));
  ensure_store(shared, [io, h](error_code ec) {
    // Deferred: a check that passed before answers from inside this call.
    detail::deliver(io, detail::Defer::yes, std::move(*h), ec);
  });
}

void IdempotentRequests::lookup_impl(std::shared_ptr<Shared> shared, std::string key,
                                     LookupHandler handler) {
  const auto io = shared->io;
  if (!valid_key(*shared, key)) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), RequestRecord{});
  }
  auto h = std::make_shared<LookupHandler>(std::move(handler));
  ensure_store(shared, [shared, key = std::move(key), io, h](error_code checked) {
    if (checked) {
      // (Deferred: a refusal kept from before answers from inside the initiating call.)
      return detail::deliver(io, detail::Defer::yes, std::move(*h), checked, RequestRecord{});
    }
    shared->calls->look(key, [io, h](error_code ec, StoreReply reply) {
      RequestRecord out;
      if (!ec) {
        using S = RequestRecord::State;
        using detail::idempotency::State;
        const auto& r = reply.record;
        switch (r.state) {
          case State::none:
            out.state = S::none;
            break;
          case State::running:
            out.state = S::running;
            break;
          case State::void_:
            out.state = S::unsent;
            break;
          case State::decided:
            out.state = S::decided;
            break;
          case State::escalated:
            out.state = S::escalated;
            break;
        }
        out.fingerprint = r.fingerprint;
        out.attempt = r.attempt;
        out.downstream_key = r.downstream_key;
        out.fencing_token = r.fence;
        out.began = std::chrono::system_clock::time_point(std::chrono::milliseconds(r.began_ms));
        out.looks = r.looks;
        out.payload_kept = r.payload.has_value();
        if (r.state == State::decided) out.response = {r.status, r.body, r.external_id};
        std::int64_t ttl = -1;
        const auto& x = reply.extra;
        if (std::from_chars(x.data(), x.data() + x.size(), ttl).ec == std::errc{} && ttl >= 0) {
          out.expires_in = std::chrono::milliseconds(ttl);
        }
      }
      detail::deliver(io, detail::Defer::no, std::move(*h), ec, std::move(out));
    });
  });
}

void IdempotentRequests::reconcile_impl(std::shared_ptr<Shared> shared, ReconcileHandler handler,
                                        AttemptFunction resend) {
  const auto io = shared->io;
  if (!shared->options_ok) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), ReconcileReport{});
  }
  auto h = std::make_shared<ReconcileHandler>(std::move(handler));
  auto round = std::make_shared<Round>();
  round->shared = std::move(shared);
  round->resend = std::move(resend);
  round->done = [io, h](error_code ec, ReconcileReport report) {
    detail::deliver(io, detail::Defer::no, std::move(*h), ec, report);
  };
  ensure_store(round->shared, [round, io, h](error_code checked) {
    // (Deferred: a refusal kept from before answers from inside the initiating call.)
    if (checked) {
      return detail::deliver(io, detail::Defer::yes, std::move(*h), checked, ReconcileReport{});
    }
    round->next_shard();
  });
}

}  // namespace redis_lock

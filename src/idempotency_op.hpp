// SPDX-License-Identifier: MIT
// Layer 5 (public API): one run (RunOp), the driver of RunFsm (idempotency_run.hpp): it does
// what each Action says (a store script, the key's lock, the caller's work or resolve) on a
// strand of its own and feeds the answer back; and what a component and its runs share
// (IdempotencyShared). Used by IdempotentRequests (src/idempotency.cpp).
#pragma once

#include "idempotency_run.hpp"
#include "idempotency_store.hpp"

#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/idempotency.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace redis_lock::detail {

struct IdempotencyShared {
  std::shared_ptr<detail::LockService> locks;
  boost::asio::any_io_executor io;  // the locks' manager's: completions default to it
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
  boost::system::error_code refused;
  std::chrono::steady_clock::time_point refused_until;
  // The check in flight and who waits for its answer (one check at a time, however many
  // calls arrive before it answers). Owned by the check's own store calls, so that a check
  // dropped at shutdown drops its waiters (as Asio drops handlers), and only watched here:
  // a waiter holds this object.
  struct Check {
    std::vector<std::function<void(boost::system::error_code)>> waiting;  // under mutex
  };
  std::weak_ptr<Check> in_flight;  // under mutex

  idempotency::RunSettings settings(bool reconcile, bool resend = false) const {
    idempotency::RunSettings s;
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

using Done = std::function<void(boost::system::error_code, RunResult)>;

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
        strand(boost::asio::make_strand(shared->io)) {}

  std::shared_ptr<detail::IdempotencyShared> shared;
  idempotency::RunFsm fsm;
  AttemptFunction work;  // the reconciler's: its resend, or none
  Done done;
  boost::asio::strand<boost::asio::any_io_executor> strand;
  LockGuard guard;
  // When the key's lock was taken (its lease's start, as the guard counts it): with
  // max_hold, an attempt's deadline and the longest the lock is kept are counted from it.
  std::chrono::steady_clock::time_point locked_at;
  std::optional<boost::asio::steady_timer> timer;       // the attempt's deadline
  std::optional<boost::asio::steady_timer> hold_timer;  // the lease's end, past a deadline
  std::shared_ptr<boost::asio::cancellation_signal> signal;
  std::shared_ptr<Asked> asked;              // the current attempt's
  boost::system::error_code override_error;  // a decided response over the bound
  // For the observer.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int works = 0;
  int resolves = 0;
  bool timed_out = false;

  auto& calls() { return *shared->calls; }

  /// `f(*this, args...)` on the strand, for a store's reply.
  template <class F>
  auto then(F f) {
    return [self = shared_from_this(), f](boost::system::error_code ec,
                                          idempotency::StoreReply reply) {
      boost::asio::post(self->strand,
                        [self, f, ec, reply = std::move(reply)]() { f(*self, ec, reply); });
    };
  }

  void act(idempotency::Action a);
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
  /// Tells the lock manager's observer (defined in src/idempotency.cpp, which may reach the
  /// manager's LockService: lock_service.hpp).
  void report(boost::system::error_code ec);
};

/// The store's checks, before a component's first call (a run, a reconciler's round, an
/// operator's listing or decision): its shard count (always) and its durability (unless
/// unchecked). `then(error)` is called once, from any thread: at once when the store passed
/// before, else when the check in flight answers (one check at a time, shared by the calls
/// that arrive meanwhile). A refusal of the store's configuration (not durable, another
/// shard count, no permission to read it) is kept a second, so that a misconfigured store
/// is not asked again by every call; a passing failure (out of memory, a lost link) is not
/// kept.
void ensure_store(const std::shared_ptr<detail::IdempotencyShared>& shared,
                  std::function<void(boost::system::error_code)> then);

/// Starts `op`: the store's checks (ensure_store), then its first step on its strand.
void start_run(const std::shared_ptr<RunOp>& op);

}  // namespace redis_lock::detail

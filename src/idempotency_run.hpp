// SPDX-License-Identifier: MIT
// Layer 4 (engine), sans-io: one idempotent request's run (IdempotentRequests::async_run)
// and one reconciler's look (async_reconcile), as decisions on what the store, the lock,
// the caller's work and resolve answered (docs/design/idempotency.md). Its driver
// (src/idempotency_op.cpp) does what each Action says and feeds the answer back; every path is
// a row of tests/unit/idempotency_run_test.cpp.
#pragma once

#include "idempotency_store.hpp"

#include <redis_lock/idempotency_types.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace redis_lock::detail::idempotency {

struct RunSettings {
  bool reconcile = false;  ///< a reconciler's look: never creates a record
  /// The reconciler has a resend: an attempt a resolve found never happened (or whose key
  /// is spent) is sent by the look itself when its record keeps the request's payload,
  /// instead of being voided for the next request to send.
  bool resend = false;
  bool resend_unsent = true;           ///< with `resend`: also an attempt found never sent
  std::int64_t first_look_ms = 0;      ///< when the reconciler first looks at a begun attempt
  std::int64_t look_cap_ms = 0;        ///< the longest wait between two looks
  std::int64_t escalate_after_ms = 0;  ///< an unknown outcome older than this: escalated
};

enum class Step {
  look,      ///< the record, without the lock (a decided one is replayed)
  lock,      ///< the key's lock (busy, or a wait, as the caller chose)
  begin,     ///< idem_begin (run, or resume for the reconciler) with the lock's fencing token
  work,      ///< the caller's work for `attempt` (the reconciler's: its resend)
  resolve,   ///< the caller's resolve for `attempt` (its outcome is unknown)
  decide,    ///< idem_decide with `response`
  void_,     ///< idem_void: the attempt did not happen
  next,      ///< idem_next: a new attempt, a new downstream key
  defer,     ///< idem_defer: still unknown, the next look later
  escalate,  ///< idem_escalate: unknown for too long
  finish,    ///< release the lock if held, then complete with `result` (or `error`)
};

struct Action {
  Step step = Step::finish;
};

/// One run's decisions. Feed each Action's answer to the matching event; the run ends with
/// Step::finish, after which result() (or error()) is what the caller is told.
class RunFsm {
 public:
  /// `payload`: the request's bytes, kept in the record while it is undecided (a run's;
  /// none for the reconciler, which reads the record's).
  RunFsm(std::string key, std::string fingerprint, RunSettings settings,
         std::optional<std::string> payload = std::nullopt)
      : key_(std::move(key)),
        fingerprint_(std::move(fingerprint)),
        settings_(settings),
        payload_(std::move(payload)) {}

  Action start();
  Action looked(boost::system::error_code ec, const StoreReply& reply);
  /// `acquired`: the lock is held with `fence`.
  Action locked(boost::system::error_code ec, bool acquired, std::uint64_t fence);
  Action begun(boost::system::error_code ec, const StoreReply& reply);
  /// What the work (Step::work) or resolve (Step::resolve) said about the attempt.
  Action learnt(const AttemptOutcome& outcome);
  /// The answer to decide, void_, next, defer or escalate.
  Action stored(boost::system::error_code ec, const StoreReply& reply);

  /// The attempt work or resolve runs for, and the fencing token it is under.
  std::uint32_t attempt() const noexcept { return record_.attempt; }
  const std::string& downstream_key() const noexcept { return record_.downstream_key; }
  /// When the attempt began (the store's clock, unix ms).
  std::int64_t began_ms() const noexcept { return record_.began_ms; }
  std::uint64_t fence() const noexcept { return fence_; }
  const std::string& key() const noexcept { return key_; }
  const std::string& fingerprint() const noexcept { return fingerprint_; }
  /// The request's payload: the run's own, or (the reconciler) the record's once begun.
  const std::optional<std::string>& payload() const noexcept { return payload_; }
  /// Step::decide: what to record.
  const StoredResponse& response() const noexcept { return response_; }
  const RunSettings& settings() const noexcept { return settings_; }
  /// Whether the lock is held (Step::finish releases it).
  bool holding() const noexcept { return holding_; }

  const RunResult& result() const noexcept { return result_; }
  boost::system::error_code error() const noexcept { return error_; }

 private:
  Action finish(RunResult::Kind kind);
  Action fail(boost::system::error_code ec);
  Action unknown_outcome();
  Action void_unconfirmed(boost::system::error_code ec, const StoreReply& reply);
  Action tell(const Record& r, RunResult::Kind kind);
  /// The reconciler sends what a resolve found unsent (it has a resend and the payload).
  bool reconciler_sends() const noexcept { return settings_.resend && payload_.has_value(); }

  std::string key_;
  std::string fingerprint_;
  RunSettings settings_;
  std::optional<std::string> payload_;
  Record record_;
  std::int64_t store_now_ms_ = 0;  // the store's clock at the begin
  std::uint64_t fence_ = 0;
  StoredResponse response_;
  Step waiting_for_ = Step::look;
  bool holding_ = false;
  RunResult result_;
  boost::system::error_code error_;
  boost::system::error_code unconfirmed_;  // a begin or next too few replicas confirmed
};

}  // namespace redis_lock::detail::idempotency

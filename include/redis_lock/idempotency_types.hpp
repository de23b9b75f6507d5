// SPDX-License-Identifier: MIT
// The values of <redis_lock/idempotency.hpp>: what a request's work answers, what a run
// tells its caller, and the component's options. Light (no Asio): the engine uses them too.
#pragma once

#include <redis_lock/export.hpp>
#include <redis_lock/idempotency_kind.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace redis_lock {

/// A decided response: what the downstream answered, replayed to every later request with
/// the same key. `body` and `external_id` are any bytes (bounded by
/// IdempotencyOptions::max_response_bytes together).
struct StoredResponse {
  int status = 0;           ///< e.g. an HTTP status
  std::string body;         ///< the response's bytes
  std::string external_id;  ///< the downstream's id of the effect (a charge id), if any

  /// Field by field.
  friend bool operator==(const StoredResponse&, const StoredResponse&) = default;
};

/// What an attempt's work, or a resolve of an attempt whose outcome was unknown, learnt.
struct AttemptOutcome {
  /// What was learnt.
  enum class Kind {
    decided,       ///< the downstream answered: `response` is final, recorded and replayed
    not_executed,  ///< the attempt certainly did not happen (refused before it was sent, or
                   ///< resolve found nothing under its downstream key): safe to send again
    unknown,       ///< it may have happened: never sent again before a resolve says otherwise
    key_spent,     ///< resolve only: the downstream key cannot be used again and nothing
                   ///< happened under any attempt: the next attempt, under a new key
  };
  Kind kind = Kind::unknown;  ///< what was learnt
  StoredResponse response;    ///< with `decided`: the downstream's answer

  /// The downstream answered `r`.
  static AttemptOutcome decided(StoredResponse r) { return {Kind::decided, std::move(r)}; }
  /// The attempt certainly did not happen.
  static AttemptOutcome not_executed() { return {Kind::not_executed, {}}; }
  /// It may have happened.
  static AttemptOutcome unknown() { return {Kind::unknown, {}}; }
  /// Resolve only: the key is used up and nothing happened under any attempt.
  static AttemptOutcome key_spent() { return {Kind::key_spent, {}}; }
};

/// What IdempotentRequests::async_run (or one look of the reconciler) tells its caller.
struct RunResult {
  /// What the caller is told (see RunKind).
  using Kind = RunKind;
  Kind kind = Kind::absent;                  ///< what the caller is told
  StoredResponse response;                   ///< executed, replayed
  std::uint32_t attempt = 0;                 ///< the attempt the answer is about (0: none began)
  std::string downstream_key;                ///< its downstream key, `<key>/<attempt>`
  std::chrono::milliseconds retry_after{0};  ///< pending: when the reconciler looks next
  /// pending: how many looks (runs' and the reconciler's) have found the request's outcome
  /// unknown, this one included (the reconciler's backoff grows with it; a new attempt after
  /// a spent key goes on counting). 0 when the look did not count (a refused decision).
  std::uint32_t looks = 0;
  /// executed: false when the decision could not be written to the store (it was out of
  /// reach, or too few replicas confirmed it): the caller is told the truth, and the
  /// attempt stays unknown in the store until a resolve records it again. Log it. (replayed:
  /// false when too few replicas confirmed the script that found the decision.)
  bool recorded = true;
};

/// A request's record as the store keeps it (IdempotentRequests::async_lookup): for an
/// operator's view and for tests, not for deciding a request (async_run does that).
struct RequestRecord {
  /// Where the request stands.
  enum class State {
    none,       ///< no record: never seen, or its retention passed
    running,    ///< an attempt began and its outcome is not known (it may have happened)
    unsent,     ///< the last attempt did not happen: the next request (or resend) sends it
    decided,    ///< `response` is final and replayed
    escalated,  ///< unknown for too long: an operator decides (async_settle, async_reopen)
  };
  State state = State::none;        ///< where it stands
  std::string fingerprint;          ///< the request's fingerprint
  std::uint32_t attempt = 0;        ///< the current attempt (0: none)
  std::string downstream_key;       ///< its downstream key, `<key>/<attempt>`
  std::uint64_t fencing_token = 0;  ///< the highest fencing token that began or resumed it
  std::chrono::system_clock::time_point began;  ///< when it began, by the store's clock
  std::uint32_t looks = 0;    ///< the looks that found its outcome unknown (running, escalated)
  bool payload_kept = false;  ///< the request's payload is kept (the reconciler can resend)
  /// How long the record is kept still (a decided one's `retention`); empty: for good (or
  /// no record).
  std::optional<std::chrono::milliseconds> expires_in;
  StoredResponse response;  ///< decided: the response
};

/// The word for a request's state ("none", "running", "unsent", "decided", "escalated").
REDIS_LOCK_EXPORT const char* request_state_name(RequestRecord::State state) noexcept;

/// How an IdempotentRequests runs: its lock, its lease, its records' lifetime, its bounds.
struct IdempotencyOptions {
  /// The key's lock is the resource `<lock_prefix><key>` of the locks' manager.
  std::string lock_prefix = "idem:";
  /// The key's lock ttl: an attempt's deadline is its lease's validity less `margin`
  /// (a work that answers later is recorded if it decided, but its run says pending).
  std::chrono::milliseconds lease{30'000};
  std::chrono::milliseconds margin{1'000};  ///< (see `lease`)
  /// 0: the key's lock is not renewed (an attempt's deadline is `lease` less `margin` after
  /// its lock was taken). More: the lock is renewed (LockOptions::auto_renew, every
  /// lease / 3) for up to this long, and an attempt's deadline is `max_hold` less `margin`
  /// after the lock was taken; a lease that stops being renewed (a renewal refused, or its
  /// validity less `margin` reached unrenewed) ends the attempt as its deadline does, and
  /// nothing is sent on it. For a downstream whose calls may take longer than a lease should.
  std::chrono::milliseconds max_hold{0};
  /// 0: a key held elsewhere answers busy at once; more: wait this long for its lock.
  std::chrono::milliseconds wait{0};
  /// How long a decided record is kept (replayed); 0: for good (a financial record).
  std::chrono::milliseconds retention{std::chrono::hours(24)};
  /// The reconciler's first look at an attempt whose outcome is unknown (0: `lease`), then
  /// twice as late each time, up to `look_cap`.
  std::chrono::milliseconds first_look{0};
  std::chrono::milliseconds look_cap{std::chrono::minutes(5)};  ///< (see `first_look`)
  /// An attempt still unknown this long after it began (the store's clock) is escalated.
  std::chrono::milliseconds escalate_after{std::chrono::hours(1)};
  /// Bounds: a key (1..max_key_bytes, no '/'), a fingerprint, a response (body + id).
  std::size_t max_key_bytes = 256;
  std::size_t max_fingerprint_bytes = 256;     ///< (see `max_key_bytes`)
  std::size_t max_response_bytes = 64 * 1024;  ///< (see `max_key_bytes`)
  /// A request's payload (IdempotentRequests::async_run with one): kept in the record while
  /// the request is undecided, for the reconciler to resend. 0: no payload is accepted.
  std::size_t max_payload_bytes = 64 * 1024;
  /// async_reconcile_sending sends an attempt a resolve found never happened
  /// (`not_executed`: its key unused) as well as the next attempt after `key_spent`. False:
  /// only the latter; the former is voided for the request's next call to send, as without
  /// a resend (for a service that told the client of such an attempt to retry, and will not
  /// act behind its back).
  bool resend_unsent = true;
  /// The records' shards (a Cluster spreads them over this many slots). Every client of
  /// one store must use the same number.
  unsigned shards = 16;
  /// Run on a store that is not durable (no `appendonly yes`, `appendfsync always`,
  /// `noeviction`): its records may be lost, and an unknown outcome with them.
  bool unchecked_store = false;
  /// Every write to the store (a begin, a decision, a void, ...) counts once this many of
  /// the store's replicas have it (WAIT, for at most `store_replication_timeout`), so that a
  /// failover to one of them keeps it. Fewer: the call fails with `error::not_replicated`
  /// (a begin: before the work, nothing sent; a decision: RunResult::recorded is false).
  /// The store's check also refuses a master with fewer replicas connected.
  int store_replicas = 0;
  std::chrono::milliseconds store_replication_timeout{1000};  ///< (see `store_replicas`)
};

}  // namespace redis_lock

// SPDX-License-Identifier: MIT
// Idempotent requests: the same request (the same key) arriving twice, at once or later,
// takes effect once, through crashes, lost leases and a downstream that fails in every way
// (docs/guide.md, "Idempotent requests"; the design: docs/design/idempotency.md).
#pragma once

#include <redis_lock/idempotency_types.hpp>
#include <redis_lock/lock.hpp>

#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace redis_lock {

namespace detail {
struct IdempotencyShared;  // what a component and its runs share (src/idempotency_op.hpp)
}

/// One attempt of a request: what its work sends downstream, and by when it must answer.
struct Attempt {
  std::string key;                  ///< the request's key
  std::uint32_t number = 0;         ///< 1, 2, ...: a new number only when a downstream key is spent
  std::string downstream_key;       ///< `<key>/<number>`: send it as the downstream's own
                                    ///< idempotency key, so that sending it again is harmless
  std::uint64_t fencing_token = 0;  ///< the key's lock's: fence the downstream's writes with it
  /// The request's payload, as given to async_run (empty without one): what the reconciler's
  /// resend sends, since it has no request of its own.
  std::string payload;
  /// When this attempt began, by the store's clock (a resolve may weigh a "never seen" from
  /// a downstream that forgets its keys after a while against the attempt's age).
  std::chrono::system_clock::time_point began;
  /// The key's lease ends soon after: answer before (an answer later is recorded if it is a
  /// decision, but the run has already said pending).
  std::chrono::steady_clock::time_point deadline;
  /// Emitted (terminal) at the deadline, on `executor`: stop waiting, answer unknown if it
  /// may have been sent. Asio's rule for slots holds: assign (or clear) it only on
  /// `executor`, e.g. in the work's call (which runs there) for an operation whose
  /// completion handler is bound to `executor` (`asio::bind_executor(a.executor, ...)`).
  boost::asio::cancellation_slot cancellation;
  /// The strand the work is called on and the cancellation emitted on.
  boost::asio::any_io_executor executor;
};

/// Answers an attempt (once, from any thread). An answer after the deadline is recorded if it
/// is a decision (the key's lock is kept until it comes or the lease ends).
using AttemptHandler = std::function<void(AttemptOutcome)>;
/// The caller's work (send one attempt) or resolve (look up what happened to one).
using AttemptFunction = std::function<void(const Attempt&, AttemptHandler)>;

/// What one round of the reconciler did.
struct ReconcileReport {
  std::size_t looked = 0;     ///< due attempts looked at
  std::size_t decided = 0;    ///< found decided (recorded)
  std::size_t voided = 0;     ///< found not to have happened (the next request sends them)
  std::size_t pending = 0;    ///< still unknown: looked at again later
  std::size_t escalated = 0;  ///< unknown for too long: an operator decides
  std::size_t busy = 0;       ///< held by a request that is running them
  std::size_t failed = 0;     ///< a store or lock error (looked at again next round)
  std::size_t sent = 0;       ///< attempts the round sent itself (async_reconcile_sending)
};

/// Idempotent requests on a lock manager and a store (the same, or a durable Redis of its
/// own). Each request key has a record in the store: its fingerprint, its state, its
/// attempt and the decided response. See async_run.
///
/// Thread safety: the member functions may be called concurrently. The object may be
/// destroyed while runs are in flight (they keep what they need).
class REDIS_LOCK_EXPORT IdempotentRequests {
 public:
  /// `locks` takes each key's lock; `store` keeps the records (its key prefix applies);
  /// `resolve` looks up an attempt whose outcome is unknown (a crash, a timeout) before
  /// anything is sent again: decided, not_executed (nothing under its key), key_spent
  /// (its key is used up and nothing happened under any attempt) or unknown.
  IdempotentRequests(LockManager& locks, LockManager& store, AttemptFunction resolve,
                     IdempotencyOptions options = {});
  /// The store is the lock's server.
  IdempotentRequests(LockManager& locks, AttemptFunction resolve, IdempotencyOptions options = {});
  ~IdempotentRequests();
  IdempotentRequests(const IdempotentRequests&) = delete;
  IdempotentRequests& operator=(const IdempotentRequests&) = delete;

  /// Runs the request `key` once. A decided key replays its response (one round trip, no
  /// lock, `work` not called); a key known with another `fingerprint` is a mismatch; a key
  /// held by another caller is busy (or waited for: IdempotencyOptions::wait). Otherwise,
  /// under the key's lock: a new or void attempt is begun and `work` sends it; an attempt
  /// whose outcome is unknown is resolved first, and sent again only if resolve says it did
  /// not happen (or, after key_spent, as the next attempt under a new downstream key). What
  /// work or resolve learnt is recorded, fenced by the lock's fencing token, then the lock
  /// is released and the caller told (RunResult).
  ///
  /// Before the first run the store is checked: its records' shard count must be this
  /// client's (`invalid_argument` and store_problem() otherwise: the first client to ask
  /// sets it), and its durability (unless IdempotencyOptions::unchecked_store):
  /// `store_not_durable` and store_problem().
  ///
  /// Completion signature: `void(boost::system::error_code, RunResult)`. Errors:
  /// `invalid_argument` (an empty or oversized key, a '/' in it, an oversized fingerprint,
  /// no work; a decided response over max_response_bytes: the attempt stays unknown), the
  /// store's and the lock's errors (`out_of_memory`, `read_only`, `timeout`, ... before the
  /// work: nothing was sent); `lock_lost` when the lease ended before the record could move.
  /// Cancellation: not supported (bounded by the lease and the command timeouts).
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_run(std::string key, std::string fingerprint, AttemptFunction work,
                 CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, RunResult)>(
        [](auto handler, std::shared_ptr<Shared> shared, std::string k, std::string f,
           AttemptFunction w) {
          run_impl(std::move(shared), std::move(k), std::move(f), std::move(w),
                   RunHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_, std::move(key), std::move(fingerprint), std::move(work));
  }

  /// async_run with the request's `payload` (up to IdempotencyOptions::max_payload_bytes):
  /// kept in the record while the request is undecided, given to `work` as
  /// Attempt::payload, and what async_reconcile_sending resends when a resolve finds an
  /// attempt never happened, so that such a request is carried out with no retry from its
  /// client. Errors as async_run's, and `invalid_argument` for an oversized payload.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_run(std::string key, std::string fingerprint, std::string payload,
                 AttemptFunction work, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, RunResult)>(
        [](auto handler, std::shared_ptr<Shared> shared, std::string k, std::string f,
           std::string p, AttemptFunction w) {
          run_impl(std::move(shared), std::move(k), std::move(f), std::move(w),
                   RunHandler(detail::slot_clearing(std::move(handler))), std::move(p));
        },
        token, shared_, std::move(key), std::move(fingerprint), std::move(payload),
        std::move(work));
  }

  /// One round of the reconciler: every shard's due attempts (whose outcome is unknown),
  /// each under its key's lock (a key held by a request is left to it): resolved, then
  /// recorded, voided, looked at again later, or escalated past escalate_after. Call it
  /// periodically (e.g. every few seconds) from one or more processes.
  ///
  /// Completion signature: `void(boost::system::error_code, ReconcileReport)`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_reconcile(CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, ReconcileReport)>(
        [](auto handler, std::shared_ptr<Shared> shared) {
          reconcile_impl(std::move(shared),
                         ReconcileHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_);
  }

  /// async_reconcile, and a round that sends: where a look's resolve finds that an attempt
  /// never happened (not_executed), or that its key is spent and nothing happened under any
  /// attempt (key_spent), and the record keeps the request's payload (async_run with one),
  /// the round sends that (next) attempt itself with `resend`, under the key's lock and the
  /// attempt's deadline, as a request's run would; what `resend` answers is recorded alike.
  /// A record without a payload is voided, for the next request to send, as without resend.
  ///
  /// Completion signature: `void(boost::system::error_code, ReconcileReport)`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_reconcile_sending(AttemptFunction resend, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, ReconcileReport)>(
        [](auto handler, std::shared_ptr<Shared> shared, AttemptFunction r) {
          reconcile_impl(std::move(shared),
                         ReconcileHandler(detail::slot_clearing(std::move(handler))), std::move(r));
        },
        token, shared_, std::move(resend));
  }

  /// The record of request `key` as the store keeps it (no lock; a state `none` when there
  /// is none): for an operator's view, a dashboard, a test's probe.
  ///
  /// Completion signature: `void(boost::system::error_code, RequestRecord)`. Errors:
  /// `invalid_argument` for a key a run would refuse; the store's.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_lookup(std::string key, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, RequestRecord)>(
        [](auto handler, std::shared_ptr<Shared> shared, std::string k) {
          lookup_impl(std::move(shared), std::move(k),
                      LookupHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_, std::move(key));
  }

  /// The store's checks (its shard count, its durability unless unchecked_store, its
  /// replicas with store_replicas), now rather than at the first call: a service that must
  /// not run on a store that could lose a record calls it at start-up and stops on an error
  /// (`store_not_durable`, `invalid_argument`, or the store's: store_problem() says why).
  /// Once passed, later calls complete at once.
  ///
  /// Completion signature: `void(boost::system::error_code)`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_check_store(CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        [](auto handler, std::shared_ptr<Shared> shared) {
          check_impl(std::move(shared), CheckHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_);
  }

  /// The escalated requests' keys, oldest first within each shard (up to 1,000 per shard): those an
  /// operator must decide with async_settle or async_reopen.
  ///
  /// Completion signature: `void(boost::system::error_code, std::vector<std::string>)`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_escalated(CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, std::vector<std::string>)>(
        [](auto handler, std::shared_ptr<Shared> shared) {
          escalated_impl(std::move(shared), KeysHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_);
  }

  /// An operator's word on an escalated request: it was decided downstream (`response` is
  /// recorded and replayed from now on). False when the request is not escalated (nothing
  /// changes).
  ///
  /// Completion signature: `void(boost::system::error_code, bool)`. Errors:
  /// `invalid_argument` for a key or a response a run would refuse.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_settle(std::string key, StoredResponse response, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
        [](auto handler, std::shared_ptr<Shared> shared, std::string k, StoredResponse r) {
          settle_impl(std::move(shared), std::move(k), std::move(r),
                      OperatorHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_, std::move(key), std::move(response));
  }

  /// An operator's word on an escalated request: nothing happened under any of its attempts.
  /// It is reopened as its next attempt, under a downstream key never sent, which the next
  /// request for the key sends. False when the request is not escalated.
  ///
  /// Completion signature: `void(boost::system::error_code, bool)`.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_reopen(std::string key, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
        [](auto handler, std::shared_ptr<Shared> shared, std::string k) {
          settle_impl(std::move(shared), std::move(k), std::nullopt,
                      OperatorHandler(detail::slot_clearing(std::move(handler))));
        },
        token, shared_, std::move(key));
  }

  /// What the last check of the store found wrong ("appendfsync is everysec, needs always",
  /// "1 replica(s) connected, 2 asked for"), or why it could not look; empty when it passed.
  std::string store_problem() const;

 private:
  using Shared = detail::IdempotencyShared;
  using RunHandler =
      boost::asio::any_completion_handler<void(boost::system::error_code, RunResult)>;
  using ReconcileHandler =
      boost::asio::any_completion_handler<void(boost::system::error_code, ReconcileReport)>;
  static void run_impl(std::shared_ptr<Shared> shared, std::string key, std::string fingerprint,
                       AttemptFunction work, RunHandler handler,
                       std::optional<std::string> payload = std::nullopt);
  static void reconcile_impl(std::shared_ptr<Shared> shared, ReconcileHandler handler,
                             AttemptFunction resend = {});
  using LookupHandler =
      boost::asio::any_completion_handler<void(boost::system::error_code, RequestRecord)>;
  static void lookup_impl(std::shared_ptr<Shared> shared, std::string key, LookupHandler handler);
  using CheckHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
  static void check_impl(std::shared_ptr<Shared> shared, CheckHandler handler);
  using KeysHandler = boost::asio::any_completion_handler<void(boost::system::error_code,
                                                               std::vector<std::string>)>;
  using OperatorHandler =
      boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;
  static void escalated_impl(std::shared_ptr<Shared> shared, KeysHandler handler);
  /// Settles with `response`, or (none) reopens.
  static void settle_impl(std::shared_ptr<Shared> shared, std::string key,
                          std::optional<StoredResponse> response, OperatorHandler handler);

  std::shared_ptr<Shared> shared_;
};

}  // namespace redis_lock

// SPDX-License-Identifier: MIT
// LockManager takes locks on Redis; LockGuard holds one and gives it back.
// The asynchronous operations' plumbing (their named initiation objects, the type-erased
// handlers handed to the compiled library) is in <redis_lock/detail/>, not part of the API.
#pragma once

#include <redis_lock/config.hpp>
#include <redis_lock/detail/initiations.hpp>
#include <redis_lock/diagnostics.hpp>
#include <redis_lock/error.hpp>
#include <redis_lock/export.hpp>
#include <redis_lock/state.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace redis_lock {

/// Ownership of one lock, like `std::unique_lock` for a Redis lease.
///
/// Completions run on the handler's associated executor, defaulting to the executor of the
/// LockManager that made the guard, also once the guard is empty (released, moved from, or
/// its lease moved out by async_release): a plain callback runs inside your
/// io_context::run(). A default-constructed guard has no manager: its completions run on the
/// handler's own associated executor (for a plain callback, Asio's system executor).
/// The operations' initiations report that executor too (`get_executor()`, for completion
/// tokens that need one, such as `asio::cancel_after` where Boost has it): the manager's, or
/// Asio's system executor for a default-constructed guard.
///
/// Move-only. A guard that still holds its lock when destroyed (or move-assigned over) posts
/// a compare-and-delete release onto its manager's executor and returns at once: it never
/// blocks and never throws. If that executor's context has shut down, nothing is posted and
/// the lease simply expires after its ttl.
///
/// Thread safety: like `std::unique_lock`, a guard belongs to one thread at a time.
/// Object lifetimes: a guard may outlive the LockManager that made it.
class REDIS_LOCK_EXPORT LockGuard {
 public:
  LockGuard() noexcept;  ///< holds nothing
  /// Takes over `other`'s lock; `other` holds nothing afterwards.
  LockGuard(LockGuard&& other) noexcept;
  /// Releases what *this held (by posting), then takes over `other`'s lock.
  LockGuard& operator=(LockGuard&& other) noexcept;
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;
  /// Still holding: posts the release (never blocks, never throws).
  ~LockGuard();

  /// True while the guard holds a lock it took (even if the lease has expired meanwhile:
  /// see lost() and valid_until()).
  bool owns_lock() const noexcept { return service_ != nullptr; }
  /// owns_lock()
  explicit operator bool() const noexcept { return owns_lock(); }
  /// The resource name given to async_acquire (empty when nothing is held).
  const std::string& resource() const noexcept { return resource_; }
  /// The random 128-bit ownership token, as 32 hex digits.
  const std::string& token() const noexcept { return token_; }
  /// Strictly increasing per resource: a protected resource rejects writes carrying a lower
  /// token than the last one it accepted. 0 when nothing is held.
  ///
  /// Minted by the acquire script from the slot's counter, never below the server's clock in
  /// microseconds (`TIME`), so tokens are large (about 1.8e15) and keep increasing when the
  /// counter is lost (a restart without persistence, eviction, FLUSHALL, a failover to a
  /// replica that missed increments). That assumes the server's clock does not step back (nor
  /// a promoted replica's clock lag the old master's by more than the failover took), and
  /// tokens below 2^53 (Lua numbers are doubles). More than one acquisition per microsecond
  /// on one slot runs the counter ahead of the clock; tokens still increase. Details and the
  /// per-deployment conditions: docs/safety.md.
  std::uint64_t fencing_token() const noexcept { return fencing_token_; }

  /// Until when the lease is certainly this guard's, on `std::chrono::steady_clock`: the
  /// start of the acquiring (or last confirmed extending) command plus its ttl, minus a
  /// drift margin (ttl / 100 + 2 ms). Only a confirmed extension moves it forward.
  /// `time_point{}` when nothing is held.
  std::chrono::steady_clock::time_point valid_until() const noexcept;

  /// True once the lease is known to be lost: an extension (the watchdog's or yours) was
  /// refused, or an auto-renewed lease reached `valid_until()` without a confirmed renewal.
  /// A guard without auto_renew learns of a silent expiry only through valid_until().
  bool lost() const noexcept;

  /// A cancellation slot that is emitted (`cancellation_type::terminal`) when the lease is
  /// lost, so work bound to it with `asio::bind_cancellation_slot` is cancelled. It is
  /// emitted on the manager's strand. Asio forbids emitting a signal concurrently with an
  /// operation installing or clearing its handler, so: with one thread running the
  /// io_context, bind it to anything on that io_context; with several threads, bind it only
  /// to operations that run on the manager's executor as a strand, or use async_wait_lost(),
  /// which completes on your handler's executor and is safe from any thread.
  /// A default (unconnected) slot when nothing is held.
  boost::asio::cancellation_slot lost_slot() const noexcept;

  /// Waits until the lease is lost.
  ///
  /// Completion signature: `void(boost::system::error_code)`: `error::lock_lost` when the
  /// lease is lost (at once if it already is; also when the guard releases a lease that was
  /// lost already: its validity passed unrenewed), `operation_aborted` when the guard
  /// releases first, is destroyed, or holds nothing. At most one wait per guard; a second replaces
  /// the first, which completes with `operation_aborted`.
  /// Per-operation cancellation: not supported; release the guard to end the wait.
  /// Thread safety: from the guard's thread. Object lifetimes: the wait shares the lease
  /// state, so the guard may be moved while it is pending.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        detail::initiate<detail::WaitLostParams>(executor_, context_alive_), token, service_,
        detail::WaitLostParams{lease_});
  }

  /// Releases the lock now: a compare-and-delete that removes the lease only if it still
  /// holds this guard's token, then notifies waiters.
  ///
  /// Completion signature: `void(boost::system::error_code, bool released)`; `released` is
  /// false when the lease had expired or belongs to another holder now. An empty guard
  /// completes with `(no error, false)` on the handler's associated executor without
  /// touching Redis.
  /// Per-operation cancellation: supported (`bind_cancellation_slot`): completes with
  /// `operation_aborted` at once; the release already sent runs on, so the lease is released
  /// or, if the command fails, expires by its ttl (the guard is empty either way).
  /// Otherwise bounded by `command_timeout`.
  /// Exception safety: strong for the guard (it is empty afterwards either way); errors are
  /// reported through the completion, never thrown.
  /// Thread safety: like any other member of the guard, from one thread at a time.
  /// Object lifetimes: the guard is empty as soon as this is called; the operation owns the
  /// lock from then on. A `deferred` operation that is never launched still releases, as the
  /// destructor would.
  ///
  /// \code
  /// bool released = co_await guard.async_release(asio::use_awaitable);
  /// \endcode
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_release(CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
        detail::initiate_release(executor_, context_alive_), token, std::move(*this));
  }

  /// Sets the remaining lease to `ttl`, if this guard still owns it (compare-and-PEXPIRE).
  ///
  /// Completion signature: `void(boost::system::error_code, bool extended)`; `extended` is
  /// false when the lease had expired or belongs to another holder now (the guard still
  /// reports owns_lock(); it is up to the caller to stop). `ttl <= 0` completes with
  /// `error::invalid_argument` before anything is sent. An empty guard completes with
  /// `(no error, false)` without touching Redis.
  /// Per-operation cancellation: supported: completes with `operation_aborted` at once; the
  /// extension already sent may still be applied, and valid_until() moves only if its reply
  /// confirms it (so a cancelled extension never makes the guard trust a lease it lost).
  /// Otherwise bounded by `command_timeout`.
  /// Exception safety: no exception on the async path; errors go to the completion.
  /// Thread safety: from the thread that owns the guard.
  /// Object lifetimes: the operation copies what it needs; the guard may be moved or
  /// destroyed while it is in flight (its destructor then releases the lock).
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_extend(std::chrono::milliseconds ttl, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
        detail::initiate<detail::ExtendParams>(executor_, context_alive_), token, service_,
        detail::ExtendParams{resource_, token_, lease_, ttl});
  }

  /// Replaces the holder label recorded with the lease (ManagerOptions::holder_label at the
  /// acquire), if this guard still owns it: what `async_inspect`, `redis-lock status` and an
  /// election's observers (at the leader's next renewal) show of the holder, for instance
  /// the step a long job has reached. The lease's expiry and fencing token stay as they are.
  ///
  /// Completion signature: `void(boost::system::error_code, bool touched)`; `touched` is
  /// false when the lease had expired or belongs to another holder now (as async_extend's
  /// `extended`: the guard then reports lost()). `error::invalid_argument` before anything is
  /// sent for a label over 128 characters or with a byte outside printable ASCII (the
  /// holder_label rule), for a semaphore's permit or a read-write lock's hold (they record
  /// no label) and on Redlock (no label is recorded there). An empty guard completes with
  /// `(no error, false)` without touching Redis.
  /// Per-operation cancellation: supported: completes with `operation_aborted` at once; the
  /// command already sent may still be applied. Otherwise bounded by `command_timeout`.
  /// Exception safety: no exception on the async path; errors go to the completion.
  /// Thread safety: from the thread that owns the guard.
  /// Object lifetimes: the operation copies what it needs (`label` too); the guard may be
  /// moved or destroyed while it is in flight.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_touch(std::string_view label, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
        detail::initiate<detail::TouchParams>(executor_, context_alive_), token, service_,
        detail::TouchParams{resource_, token_, lease_, std::string(label)});
  }

 private:
  friend LockGuard detail::to_public(detail::Grant&& grant) noexcept;
  friend struct detail::initiate_release;
  /// Takes over the lease the engine granted (nothing, for an empty grant).
  explicit LockGuard(detail::Grant&& grant) noexcept;
  void release_detached() noexcept;
  static void release_impl(LockGuard guard, detail::BoolHandler handler, Diagnostics* diagnostics);

  std::shared_ptr<detail::LockService> service_;
  std::string resource_;
  std::string token_;
  std::uint64_t fencing_token_ = 0;
  std::shared_ptr<detail::LeaseState> lease_;  // validity, loss, renewal
  // The manager's executor: completions default to it, also once the guard is empty.
  // Copied, never moved out, so that a moved-from guard keeps it; with the flag that says
  // whether its context still runs.
  boost::asio::any_io_executor executor_;
  detail::ContextAlive context_alive_;
};

namespace detail {
inline LockGuard to_public(Grant&& grant) noexcept { return LockGuard(std::move(grant)); }
}  // namespace detail

/// Takes locks on one Redis server. Many requests share one pipelined connection.
///
/// Thread safety: all member functions may be called concurrently, including from several
/// threads running the same io_context.
/// Object lifetimes: operations in flight and guards keep the shared state alive, so the
/// manager may be destroyed before them. A manager with nothing in flight keeps no work
/// pending on its executor (io_context::run() returns).
class REDIS_LOCK_EXPORT LockManager {
 public:
  /// The executor completions run on unless a handler has its own associated executor.
  using executor_type = boost::asio::any_io_executor;

  /// A manager for the server in `config`. Nothing is connected yet: the first acquire
  /// connects. A configuration that cannot work (see ConnectionConfig) is reported by every
  /// acquire, before anything is sent. TLS files are read here.
  LockManager(executor_type ex, ConnectionConfig config);
  /// As above, with a key prefix, client name or observer (ManagerOptions).
  LockManager(executor_type ex, ConnectionConfig config, ManagerOptions options);
  /// A moved-from manager refuses acquires with `error::invalid_argument`, completing on
  /// the executor it was made with (which it keeps).
  LockManager(LockManager&& other) noexcept
      : executor_(other.executor_),
        context_alive_(other.context_alive_),
        service_(std::move(other.service_)) {}
  /// Move assignment; operations of the replaced manager continue.
  LockManager& operator=(LockManager&& other) noexcept {
    executor_ = other.executor_;
    context_alive_ = other.context_alive_;
    service_ = std::move(other.service_);
    return *this;
  }
  /// Operations in flight and guards keep the shared state alive.
  ~LockManager();

  /// The executor given to the constructor.
  executor_type get_executor() const noexcept { return executor_; }

  /// Tries to take the lock on `resource` for `options.ttl`.
  ///
  /// Completion signature: `void(boost::system::error_code, LockGuard)`. When the lock is
  /// still held elsewhere after `options.wait`, completes with no error and an empty guard:
  /// contention is not an error. Errors are failures: `invalid_argument` (empty resource,
  /// ttl <= 0, negative wait; nothing is sent), I/O errors (`timeout`, `connection_lost`,
  /// `connect_failed`, ...), and server errors (`wrong_type`, `out_of_memory`, `read_only`,
  /// `not_authenticated`, `no_permission`, `server_error`), and configuration errors
  /// (`tls_config_invalid`, `tls_handshake_failed`). When the reply is lost the lock state is
  /// unknown: the error is reported and a best-effort release is sent.
  /// Per-operation cancellation: supported (`bind_cancellation_slot`): completes with
  /// `operation_aborted`, leaves the wait queue, and releases a lease that arrived meanwhile.
  /// Otherwise bounded by `command_timeout` and `wait`.
  /// Exception safety: no exception escapes on the async path (a failed allocation in the
  /// initiating call may throw `std::bad_alloc`, as with any Asio initiation).
  /// Thread safety: may be called from any thread, concurrently.
  /// Object lifetimes: `resource` is copied before this returns; the manager may be
  /// destroyed while the operation is in flight.
  ///
  /// \code
  /// LockGuard g = co_await locks.async_acquire("order:42", {.ttl = 5s}, asio::use_awaitable);
  /// if (!g) co_return reply_409();
  /// \endcode
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire(std::string_view resource, LockOptions options = {},
                     CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, LockGuard)>(
        detail::initiate<detail::AcquireParams>(executor_, context_alive_), token, service_,
        detail::AcquireParams{std::string(resource), options, {}});
  }

  /// `async_acquire(resource, {}, token)`: takes the lock with the default LockOptions
  /// (a 10 s lease, one attempt, no renewal). Completion, errors and the rest as above.
  ///
  /// \code
  /// LockGuard g = co_await locks.async_acquire("report:daily", asio::use_awaitable);
  /// \endcode
  template <class CompletionToken>
    requires detail::token_without_options<CompletionToken, LockGuard>
  auto async_acquire(std::string_view resource, CompletionToken&& token) {
    return async_acquire(resource, LockOptions{}, std::forward<CompletionToken>(token));
  }

  /// Takes one of `limit` permits of the semaphore `resource`: at most `limit` guards hold
  /// one at any instant, across processes, each with its own lease of `options.ttl`.
  ///
  /// Completion signature: `void(boost::system::error_code, LockGuard)`, as async_acquire:
  /// an empty guard when no permit came free within `options.wait` (waiters are served in
  /// arrival order, one per freed permit). The guard is an ordinary LockGuard (release,
  /// extend, auto_renew, lost_slot(), a fencing token larger than every earlier one on
  /// `resource`). Errors as async_acquire, and: `invalid_argument` for `limit == 0` or on a
  /// Redlock manager (nothing is sent); `limit_mismatch` when the semaphore is held or waited
  /// for with another limit (the first acquire of an idle semaphore sets it); `wrong_type`
  /// when `resource` is in use as a mutex or a read-write lock.
  /// Cancellation, thread safety and lifetimes as async_acquire.
  ///
  /// \code
  /// LockGuard permit = co_await locks.async_acquire_permit("provider:acme", 3,
  ///                                                         {.ttl = 10s, .wait = 2s},
  ///                                                         asio::use_awaitable);
  /// \endcode
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire_permit(std::string_view resource, std::uint32_t limit,
                            LockOptions options = {}, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, LockGuard)>(
        detail::initiate<detail::AcquireParams>(executor_, context_alive_), token, service_,
        detail::AcquireParams{std::string(resource), options, {AcquireKind::permit, limit}});
  }

  /// `async_acquire_permit(resource, limit, {}, token)`: the default LockOptions.
  template <class CompletionToken>
    requires detail::token_without_options<CompletionToken, LockGuard>
  auto async_acquire_permit(std::string_view resource, std::uint32_t limit,
                            CompletionToken&& token) {
    return async_acquire_permit(resource, limit, LockOptions{},
                                std::forward<CompletionToken>(token));
  }

  /// Takes a shared (read) hold of the read-write lock `resource`: any number of shared
  /// holders together, never with an exclusive holder. Fair: a reader does not overtake an
  /// exclusive waiter queued before it, and readers queued together are let in together.
  ///
  /// Completion signature, errors and the rest as async_acquire_permit (without a limit):
  /// `wrong_type` when `resource` is in use as a mutex or a semaphore; `invalid_argument` on
  /// Redlock.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire_shared(std::string_view resource, LockOptions options = {},
                            CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, LockGuard)>(
        detail::initiate<detail::AcquireParams>(executor_, context_alive_), token, service_,
        detail::AcquireParams{std::string(resource), options, {AcquireKind::shared, 0}});
  }

  /// `async_acquire_shared(resource, {}, token)`: the default LockOptions.
  template <class CompletionToken>
    requires detail::token_without_options<CompletionToken, LockGuard>
  auto async_acquire_shared(std::string_view resource, CompletionToken&& token) {
    return async_acquire_shared(resource, LockOptions{}, std::forward<CompletionToken>(token));
  }

  /// Takes the exclusive (write) hold of the read-write lock `resource`: no other holder,
  /// shared or exclusive, at the same time. As async_acquire_shared otherwise.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire_exclusive(std::string_view resource, LockOptions options = {},
                               CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, LockGuard)>(
        detail::initiate<detail::AcquireParams>(executor_, context_alive_), token, service_,
        detail::AcquireParams{std::string(resource), options, {AcquireKind::exclusive, 0}});
  }

  /// `async_acquire_exclusive(resource, {}, token)`: the default LockOptions.
  template <class CompletionToken>
    requires detail::token_without_options<CompletionToken, LockGuard>
  auto async_acquire_exclusive(std::string_view resource, CompletionToken&& token) {
    return async_acquire_exclusive(resource, LockOptions{}, std::forward<CompletionToken>(token));
  }

  /// Takes the mutexes of all `resources` (the locks async_acquire takes), or none.
  ///
  /// Completion signature: `void(boost::system::error_code, std::vector<LockGuard>)`: either
  /// one guard per resource, in the order given, each owning its lock; or an empty vector
  /// and nothing held or queued anywhere (a resource still held elsewhere after
  /// `options.wait` is no error, as for async_acquire). Resources are taken in one global
  /// order (Cluster slot, then name), so callers whose sets overlap in any order never
  /// deadlock; those of one slot (a shared `{tag}`; all of them on a single server) are
  /// taken in one script when all are free, else one by one, waiting fairly in each
  /// resource's queue; `options.wait` bounds the whole. Errors as async_acquire, and
  /// `invalid_argument` for an empty list or a resource named twice.
  /// Cancellation: supported; what was taken is released. Thread safety and lifetimes as
  /// async_acquire; `resources` is moved in.
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire_all(std::vector<std::string> resources, LockOptions options = {},
                         CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code, std::vector<LockGuard>)>(
        detail::initiate<detail::AcquireAllParams>(executor_, context_alive_), token, service_,
        detail::AcquireAllParams{std::move(resources), options});
  }

  /// `async_acquire_all(resources, {}, token)`: the default LockOptions.
  template <class CompletionToken>
    requires detail::token_without_options<CompletionToken, std::vector<LockGuard>>
  auto async_acquire_all(std::vector<std::string> resources, CompletionToken&& token) {
    return async_acquire_all(std::move(resources), LockOptions{},
                             std::forward<CompletionToken>(token));
  }

  /// Who holds `resource`, for how long, and how many wait: one atomic read of the lease,
  /// its holder's record and its queue. Nothing is changed. Works for mutexes (and elections:
  /// resource `election:<name>`), semaphores and read-write locks.
  ///
  /// Completion signature: `void(boost::system::error_code, LockInfo)`. Errors as
  /// async_acquire's I/O and server errors; `invalid_argument` for an empty resource or on a
  /// Redlock manager (each master has its own view; nothing is sent).
  /// Per-operation cancellation: supported: completes with `operation_aborted` at once (the
  /// read's answer is dropped). Otherwise bounded by `command_timeout`.
  /// Thread safety and lifetimes as async_acquire.
  ///
  /// \code
  /// LockInfo info = co_await locks.async_inspect("order:42", asio::use_awaitable);
  /// \endcode
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_inspect(std::string_view resource, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, LockInfo)>(
        detail::initiate<detail::InspectParams>(executor_, context_alive_), token, service_,
        detail::InspectParams{std::string(resource)});
  }

  /// Takes `resource` away from whoever holds it, for an operator facing a stuck holder: the
  /// lease (every hold of a semaphore or read-write lock) is deleted and the next waiter
  /// served, as a release would. The next holder's fencing token is larger than the evicted
  /// holder's, so a protected resource refuses the evicted holder's fenced writes; the
  /// evicted guard's release and extensions return false, and its next renewal reports the
  /// loss (lost_slot()). The evicted holder's work may still be running: fencing, not this
  /// call, is what keeps it from doing harm (docs/safety.md).
  ///
  /// Completion signature: `void(boost::system::error_code, bool released)`: false when
  /// nothing held it (nothing is changed). Errors and the rest as async_inspect; a cancelled
  /// force-release completes with `operation_aborted` at once while the command sent runs on
  /// (the holder may still be evicted).
  template <class CompletionToken = boost::asio::deferred_t>
  auto async_force_release(std::string_view resource, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
        detail::initiate<detail::ForceReleaseParams>(executor_, context_alive_), token, service_,
        detail::ForceReleaseParams{std::string(resource)});
  }

  /// The full text of the most recent error reply from the server (thread-safe copy).
  std::string last_server_error() const;

  /// Ends this manager's work gracefully: every operation of it that is waiting (every
  /// acquire form, async_acquire_all, Election::async_campaign and async_observe) completes
  /// with `operation_aborted`, exactly as its own per-operation cancellation would: it
  /// leaves the wait queues it joined, and a lease that reached it meanwhile is released.
  /// So a holder's release hands nothing to a place nobody will claim.
  ///
  /// Guards are not touched: a lease a guard holds stays held (and renewed) until the guard
  /// releases it or is destroyed; release them to end everything. Releases, extensions and
  /// inspections under way run to their end (each is bounded by `command_timeout`).
  /// Operations started after this call are not affected; the manager stays usable.
  /// Call it before destroying the io_context and let the context run until its work is
  /// done: the give-backs are commands. (An io_context destroyed with acquires still queued
  /// writes their give-backs on its way out where a plain link can take them at once, and
  /// otherwise leaves the places to lapse, 1.2 s at most.)
  ///
  /// Thread safety: may be called from any thread, concurrently. A moved-from manager, or
  /// one whose io_context is gone, does nothing.
  void cancel();

 private:
  friend class Election;
  friend class IdempotentRequests;

  executor_type executor_;
  detail::ContextAlive context_alive_;  // kept by a moved-from manager, like the executor
  std::shared_ptr<detail::LockService> service_;
};

}  // namespace redis_lock

// The initiations' call operators, which need the complete classes above.
#include <redis_lock/detail/initiations_impl.hpp>

// SPDX-License-Identifier: MIT
// Hooks for metrics and logs: what a LockManager did, as it happens.
#pragma once

#include <redis_lock/idempotency_kind.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace redis_lock {

/// Which call an acquire came from, and so what its lease is of.
enum class AcquireKind : std::uint8_t {
  mutex,      ///< `async_acquire` (and each resource of `async_acquire_all`)
  permit,     ///< `async_acquire_permit`: one of a semaphore's permits
  shared,     ///< `async_acquire_shared`: a read-write lock's shared hold
  exclusive,  ///< `async_acquire_exclusive`: a read-write lock's exclusive hold
  election,   ///< `Election::async_campaign`: the leadership
};

// Each event enum's values have names (for logs, and PrometheusObserver's labels): a switch
// without a default beside the enum, so that a value added to it fails the build until it
// is named here. An unknown value (a cast) has none: an empty view.

/// "mutex", "permit", "shared", "exclusive", "election".
constexpr std::string_view to_string(AcquireKind kind) noexcept {
  switch (kind) {
    case AcquireKind::mutex:
      return "mutex";
    case AcquireKind::permit:
      return "permit";
    case AcquireKind::shared:
      return "shared";
    case AcquireKind::exclusive:
      return "exclusive";
    case AcquireKind::election:
      return "election";
  }
  return {};
}

/// How an `async_acquire` ended.
enum class AcquireOutcome {
  acquired,      ///< the guard holds the lock
  not_acquired,  ///< held elsewhere (for the whole `wait`): contention, not an error
  failed,        ///< completed with an error (see `AcquireEvent::error`)
  cancelled,     ///< cancelled through its cancellation slot
};

/// "acquired", "not_acquired", "failed", "cancelled".
constexpr std::string_view to_string(AcquireOutcome outcome) noexcept {
  switch (outcome) {
    case AcquireOutcome::acquired:
      return "acquired";
    case AcquireOutcome::not_acquired:
      return "not_acquired";
    case AcquireOutcome::failed:
      return "failed";
    case AcquireOutcome::cancelled:
      return "cancelled";
  }
  return {};
}

/// How one Redlock master answered a command (Topology::redlock only).
enum class NodeOutcome {
  granted,    ///< took the lease / the lease was ours (released, extended)
  refused,    ///< held by someone else / no longer ours
  failed,     ///< an error (see `NodeResult::error`): timeout, connection, server error
  no_answer,  ///< the majority had decided before this master answered
};

/// "granted", "refused", "failed", "no_answer".
constexpr std::string_view to_string(NodeOutcome outcome) noexcept {
  switch (outcome) {
    case NodeOutcome::granted:
      return "granted";
    case NodeOutcome::refused:
      return "refused";
    case NodeOutcome::failed:
      return "failed";
    case NodeOutcome::no_answer:
      return "no_answer";
  }
  return {};
}

/// One Redlock master's part in an acquire, release, extension or renewal.
struct NodeResult {
  std::size_t node = 0;                           ///< index in ConnectionConfig::nodes
  NodeOutcome outcome = NodeOutcome::no_answer;   ///< what it said
  boost::system::error_code error{};              ///< with `failed`
  std::chrono::steady_clock::duration latency{};  ///< from sending to its answer
};

/// One completed `async_acquire`.
struct AcquireEvent {
  std::string_view resource;                    ///< as given to async_acquire
  AcquireOutcome outcome;                       ///< how it ended
  boost::system::error_code error;              ///< with `failed` and `cancelled`
  std::chrono::steady_clock::duration latency;  ///< from the call to the completion
  int attempts;                                 ///< acquire scripts run (1 unless it waited)
  bool waited;                                  ///< it joined the wait queue (contention)
  std::uint64_t fencing_token;                  ///< with `acquired`, else 0
  /// Redlock: each master's answer to the last attempt (empty for other topologies).
  std::span<const NodeResult> nodes = {};
  /// With `failed`: what was wrong, as a user reads it: the rule an argument or the
  /// configuration broke ("LockOptions::ttl must be > 0"), or the server's error reply.
  /// Empty when the error says it all (I/O).
  std::string_view detail = {};
  /// Which call it was (a refusal before anything was sent: `mutex` unless the call was
  /// checked as another kind).
  AcquireKind kind = AcquireKind::mutex;
};

/// An acquire found its resource held elsewhere and has a `wait`: it waits (joins the queue),
/// or, if its wait had already run out, completes not acquired at once. Reported once per
/// acquire, before its AcquireEvent, which then has `waited` set: acquires waiting now =
/// these minus those AcquireEvents.
struct WaitEvent {
  std::string_view resource;  ///< as given to the acquire
  AcquireKind kind;           ///< which call
};

/// How a held lease stopped being held, from its guard's point of view.
enum class HoldEnd : std::uint8_t {
  released,  ///< its guard was released or dropped (whether or not the lease was still ours)
  lost,      ///< the lease was lost while held (`on_lost`, the guard's `lost_slot()`)
};

/// "released", "lost".
constexpr std::string_view to_string(HoldEnd end) noexcept {
  switch (end) {
    case HoldEnd::released:
      return "released";
    case HoldEnd::lost:
      return "lost";
  }
  return {};
}

/// The end of a lease an AcquireEvent handed out (`acquired`): once per such lease, at its
/// release or its loss, whichever comes first. Leases held now = acquired AcquireEvents minus
/// these. (A guard that outlives its manager's io_context, or is dropped after the context
/// stopped running, cannot be reported: the manager's strand no longer runs.)
struct HoldEvent {
  std::string_view resource;                     ///< the guard's resource
  AcquireKind kind;                              ///< which call acquired it
  HoldEnd end;                                   ///< released or lost
  std::chrono::steady_clock::duration held_for;  ///< from its AcquireEvent to its end
};

/// What a compare-and-act command on a held lease did.
enum class LeaseCommand {
  release,  ///< `async_release`, or the release a guard's destructor posts
  extend,   ///< `async_extend`
  renewal,  ///< the watchdog's extension of an auto-renewed guard
  touch,    ///< `async_touch`: the holder label replaced
};

/// "release", "extend", "renewal", "touch".
constexpr std::string_view to_string(LeaseCommand command) noexcept {
  switch (command) {
    case LeaseCommand::release:
      return "release";
    case LeaseCommand::extend:
      return "extend";
    case LeaseCommand::renewal:
      return "renewal";
    case LeaseCommand::touch:
      return "touch";
  }
  return {};
}

/// One release, extension, renewal or touch, answered or failed.
struct LeaseEvent {
  std::string_view resource;  ///< the guard's resource
  LeaseCommand command;       ///< which command
  /// The lease was still ours (released / extended). False without an error: it had
  /// expired or belongs to someone else now.
  bool succeeded;
  boost::system::error_code error;              ///< the command failed (no answer, server error)
  std::chrono::steady_clock::duration latency;  ///< from sending to the reply
  /// Redlock: each master's answer (empty for other topologies).
  std::span<const NodeResult> nodes = {};
  /// With an error: the server's error reply (single-server topologies), else empty.
  std::string_view detail = {};
};

/// An operation that holds nothing: it reads or clears a resource's state, or watches an
/// election.
enum class AdminCommand {
  inspect,        ///< `LockManager::async_inspect`
  force_release,  ///< `LockManager::async_force_release`
  leader,         ///< `Election::async_leader`
  observe,        ///< `Election::async_observe` (reported when it completes)
};

/// "inspect", "force_release", "leader", "observe".
constexpr std::string_view to_string(AdminCommand command) noexcept {
  switch (command) {
    case AdminCommand::inspect:
      return "inspect";
    case AdminCommand::force_release:
      return "force_release";
    case AdminCommand::leader:
      return "leader";
    case AdminCommand::observe:
      return "observe";
  }
  return {};
}

/// One completed inspection, force-release, leader read or election observation.
struct AdminEvent {
  std::string_view resource;  ///< as given (an election's name for `leader` and `observe`)
  AdminCommand command;       ///< which operation
  /// None when it was answered; `operation_aborted` when it was cancelled.
  boost::system::error_code error;
  std::chrono::steady_clock::duration latency;  ///< from the call to the completion
  /// With an error: what was wrong, as a user reads it: the rule the resource or the
  /// configuration broke, or the server's error reply. Empty when the error says it all.
  std::string_view detail = {};
};

/// What a lock server's connect found that an operator should know, though the connect
/// went on.
enum class ServerNoticeKind : std::uint8_t {
  /// The server evicts keys (`maxmemory` above 0 and a `maxmemory-policy` other than
  /// `noeviction`), so a held lease could vanish; `ManagerOptions::accept_evicting_server`
  /// let the connect go on (without it, the connect fails with `error::server_evicts`).
  evicting_policy,
  /// Whether the server evicts keys is unknown: it refused `INFO` (an ACL user without
  /// `+info`: `NOPERM`; a renamed command; a proxy), or its `INFO memory` did not name
  /// `maxmemory` and `maxmemory_policy`.
  policy_unknown,
};

/// "evicting_policy", "policy_unknown".
constexpr std::string_view to_string(ServerNoticeKind kind) noexcept {
  switch (kind) {
    case ServerNoticeKind::evicting_policy:
      return "evicting_policy";
    case ServerNoticeKind::policy_unknown:
      return "policy_unknown";
  }
  return {};
}

/// A lock server's connect went on with something to say (see ServerNoticeKind). Reported
/// when the connection that found it is ready, before any command is sent on it; then
/// `LockManager::last_server_error()` says the same text. Said once per manager for each
/// server and text (`evicting_policy`: a reconnect that finds the same says nothing; one
/// that finds another policy or maxmemory says it), and once per manager at all for
/// `policy_unknown`.
struct ServerNotice {
  /// The server, as the connection knows it: "host:port" ("[v6]:port"), the Unix socket's
  /// path, or (Sentinel) the master's address the sentinels gave.
  std::string_view address;
  ServerNoticeKind kind;  ///< what was found
  /// In words, e.g. "the lock server evicts keys (maxmemory-policy volatile-lru, maxmemory
  /// 104857600): a lease could vanish while held (accepted: ...)".
  std::string_view text;
};

/// One idempotent request's run (`IdempotentRequests::async_run`) or one reconciler's look at
/// a key (`async_reconcile`), reported when it completes to the observer of the component's
/// lock manager (on that manager's strand, as its own events).
struct IdempotencyEvent {
  std::string_view key;  ///< the request's key
  /// The key's lock's resource, `<lock_prefix><key>` (IdempotencyOptions::lock_prefix): what
  /// an observer groups by, as it groups the lock's own events (and what tells two
  /// components on one manager apart).
  std::string_view resource;
  bool reconciler;  ///< a reconciler's look, not a request's run
  /// What the caller was told (with no error): replayed, busy, mismatch, executed, pending
  /// (an unknown outcome), not_executed, escalated, absent (the reconciler had nothing to do).
  RunKind result;
  boost::system::error_code error;  ///< the run failed (`result` then means nothing)
  std::uint32_t attempt;            ///< the attempt it was about (0: none began)
  int works;       ///< how many times an attempt was sent (the run's work, or the reconciler's
                   ///< resend): 0 or 1, 2 after a resolve said the first never happened or its
                   ///< key was spent
  int resolves;    ///< how many times resolve was called (an unknown outcome looked up)
  bool timed_out;  ///< the work or resolve had not answered by the attempt's deadline
  /// pending: how many looks (a run's or the reconciler's) have found this attempt's outcome
  /// unknown, this one included: its backoff's count ("still unknown after look 3"). 0
  /// otherwise.
  std::uint32_t looks;
  /// pending: when the reconciler looks next, from now (RunResult::retry_after).
  std::chrono::milliseconds retry_after;
  std::chrono::steady_clock::duration latency;  ///< from the call to the completion
};

/// Receives what one or more LockManagers do. Install it with `ManagerOptions::observer`;
/// without one (the default) the cost is one pointer test per event.
///
/// Calls come from the manager's strand — never two at once for one manager — but several
/// managers sharing an observer call it concurrently. Do not block: count, enqueue, return.
/// Resource names are views valid only during the call. The observer must not throw.
class Observer {
 public:
  virtual ~Observer() = default;
  /// An async_acquire completed (also with bad input, reported as `failed`).
  virtual void on_acquire(const AcquireEvent&) noexcept {}
  /// A guard's release, extension or renewal was answered or failed. (Releases the library
  /// sends to clean up after a failed or cancelled acquire are not reported.)
  virtual void on_lease(const LeaseEvent&) noexcept {}
  /// A held lease was lost: a renewal found it gone, or no renewal succeeded before it could
  /// have expired (the guard's `lost_slot()` fires right after this call).
  virtual void on_lost(std::string_view /*resource*/) noexcept {}
  /// An inspection, force-release, leader read or election observation completed (also
  /// with bad input, cancelled, or failed).
  virtual void on_admin(const AdminEvent&) noexcept {}
  /// An acquire joined its resource's wait queue (see WaitEvent).
  virtual void on_wait(const WaitEvent&) noexcept {}
  /// A lease handed out by an acquire stopped being held: released or lost (see HoldEvent).
  virtual void on_hold_end(const HoldEvent&) noexcept {}
  /// A lock server's connect went on with something to say: it evicts keys (accepted), or
  /// whether it does is unknown (see ServerNotice).
  virtual void on_server_notice(const ServerNotice&) noexcept {}
  /// An idempotent request's run or a reconciler's look completed (see IdempotencyEvent).
  virtual void on_idempotency(const IdempotencyEvent&) noexcept {}
};

}  // namespace redis_lock

// SPDX-License-Identifier: MIT
// Layer 4 (engine): compare-and-act commands on one lease: release (compare-and-delete,
// hand-off to the next waiter, queue exit) and extend (compare-and-PEXPIRE), and the
// give-back that releases what a failed acquire may hold, resent through link failures.
#pragma once

#include "backoff.hpp"
#include "lease.hpp"
#include "script_op.hpp"

#include <redis_lock/detail/initiations.hpp>
#include <redis_lock/observer.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace redis_lock::detail {

class Watchdog;

using BoolHandler = boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;

// A give-back that met a link failure is sent again after this, doubling up to the max; a
// give-back is not retried past the horizon (a server gone for good must not keep the
// manager busy for a long ttl).
inline constexpr std::chrono::milliseconds give_back_first_retry{25};
inline constexpr std::chrono::milliseconds give_back_max_retry{500};
inline constexpr std::chrono::milliseconds give_back_horizon{60'000};

/// A give-back's retries: 25 ms doubling up to give_back_max_retry.
inline constexpr Backoff give_back_backoff{give_back_first_retry, give_back_max_retry};

/// A compare-and-act script on one lease: release (arg = channel) or extend (arg = ttl).
// Handlers are only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
/// A release's or an extension's script call (release.lua, release_set.lua, extend.lua,
/// extend_set.lua): its words view these strings, each its own.
struct LeaseCallOp : ScriptOp {
  std::string token;          ///< the holder's (a lease set's extension: token .. mode, its holder)
  std::string ttl_ms;         ///< an extension's new ttl
  std::string member_suffix;  ///< a release's, when not the manager id itself
  std::string notify;         ///< a release's: Engine::notify_of its slot
  std::string announce;       ///< an election's leader: Engine::announce_of its resource
};

/// A compare-and-act call on a held lease, answered as "still ours or not" (read_compare).
/// An operation whose call has words of its own beyond LeaseCallOp's derives from it in
/// its own file (lease_ops.cpp's TouchOp holds the new label).
struct CompareOp : LeaseCallOp {
  explicit CompareOp(BoolHandler h) : handler(std::move(h)) {}
  std::shared_ptr<LeaseState> lease;  // an extension moves its validity (or finds it lost)
  std::string resource;               // set when the observer hears of this op
  LeaseCommand command = LeaseCommand::release;
  std::chrono::milliseconds new_ttl{};
  std::chrono::steady_clock::time_point sent = std::chrono::steady_clock::now();
  /// A give-back: resent through link failures until then.
  std::chrono::steady_clock::time_point give_back_until{};
  Backoff backoff = give_back_backoff;
  BoolHandler handler;
  Diagnostics* diagnostics = nullptr;  // bound to the handler: told a failure's detail
  bool overdue = false;  // timed out; the late reply (or `patience`) answers the caller
  std::unique_ptr<boost::asio::steady_timer> overdue_timer;

  void on_reply(boost::system::error_code ec, Reply reply) override;
  /// A release the caller waits for that timed out is overdue while its lease may be valid
  /// (`patience`): its late reply answers the caller, as an on-time one would (a server slow
  /// with a storm of connects says "released" a little late, not "timeout"); at `patience`
  /// the timeout does.
  void on_late_reply(boost::system::error_code ec, const Reply& reply) override;
  /// The caller's cancellation: completes with operation_aborted now. The command runs on:
  /// a release may still release (else the lease expires by its ttl), an extension still
  /// extend (the guard's validity moves only when a reply confirms it, as before).
  void cancel();

 private:
  /// min_replicas: an extension counts once WAIT says enough replicas have it.
  void confirm_replicated();
  /// `detail`: with `ec`, the server's text for it (an error reply to WAIT).
  void finish(boost::system::error_code ec, Reply reply, std::string_view detail = {});
};

/// Fills in a release of `token`'s lease of `kind`: compare-and-delete, hand the lease to the
/// next waiter (published on its manager's channel), leave the queue (as member token +
/// `member_suffix`; empty: a holder's, who is not queued).
void prepare_release(Engine& service, CompareOp& op, std::string_view resource, std::string token,
                     AcquireKind kind, std::string_view member_suffix = {});

/// Fills in an extension of `token`'s lease of `kind` to `ttl_ms` (compare-and-PEXPIRE; a
/// leader's also tells the election's observers).
void prepare_extend(Engine& service, LeaseCallOp& op, const std::string& resource,
                    std::string token, AcquireKind kind, std::string ttl_ms);
/// The arguments of an extension prepare_extend filled in, set again (before a resend).
void set_extend_args(LeaseCallOp& op, AcquireKind kind);

/// Sends one renewal of `lease` (RenewalHost::send_renewal, for the engine): an extension
/// built once per lease and sent again each time; its answer goes to `watchdog.renewed()`.
void send_renewal(Engine& service, const std::shared_ptr<LeaseState>& lease, Watchdog& watchdog,
                  std::chrono::steady_clock::time_point sent);

/// Redlock: gives back on master `node` what `token` may hold there, resent through link
/// failures until `until`.
void give_back_on(Engine& service, std::size_t node, std::string_view resource,
                  std::string_view token, std::chrono::steady_clock::time_point until);

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// Layer 4 (engine): reading and clearing a resource's state for operators and elections:
// inspect.lua (LockManager::async_inspect, Election::async_leader and the observers' reads)
// and force_release.lua (LockManager::async_force_release).
#pragma once

#include "lease_ops.hpp"
#include "script_op.hpp"
#include "validate.hpp"

#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/initiations.hpp>
#include <redis_lock/observer.hpp>
#include <redis_lock/state.hpp>

#include <boost/asio/error.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock::detail {

/// One script call whose reply goes to `done`, on the strand.
struct AdminOp final : ScriptOp {
  std::function<void(boost::system::error_code, Reply)> done;
  ResourceKeys sets;     // the same resource's lease sets' keys (their queue and its expiry)
  std::string notify;    // force_release: Engine::notify_of the slot
  std::string announce;  // force_release: Engine::announce_of the resource
  void on_reply(boost::system::error_code ec, Reply reply) override {
    if (done) std::exchange(done, nullptr)(ec, std::move(reply));
  }
};

/// What inspect.lua saw: the public LockInfo, and a leader's value (its data after the
/// label's newline).
struct Inspection {
  LockInfo info;
  std::string value;
  std::string detail;  ///< with an error: the server's error reply
  /// The election's leader, if a mutex lease with a recorded holder is held.
  std::optional<Leader> leader() const;
};

/// inspect.lua's reply; nullopt when malformed.
std::optional<Inspection> read_inspection(const Reply& reply);

class Engine;

/// A one-command operation's caller, cancellable: cancel() completes it with
/// operation_aborted at once, and the reply, when it comes, finds nobody waiting. On the
/// strand. (The operations change nothing the caller holds: an inspection reads, a
/// force-release runs on, or not, as it would have without the caller.)
/// Its completion, also a cancelled one, is reported to the observer (on_admin).
template <class Handler, class Value>
struct CancellableCall : std::enable_shared_from_this<CancellableCall<Handler, Value>> {
  CancellableCall(std::shared_ptr<Engine> e, Handler h, AdminCommand c, std::string r)
      : service(std::move(e)), handler(std::move(h)), command(c), resource(std::move(r)) {}
  void cancel() { complete(boost::asio::error::operation_aborted, Value{}); }
  /// `detail`: with an error, the server's reply.
  void complete(boost::system::error_code ec, Value value, std::string detail = {});

  std::shared_ptr<Engine> service;
  Handler handler;
  AdminCommand command;
  std::string resource;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  Diagnostics* diagnostics = nullptr;  // bound to the handler: told a failure's detail
};

/// inspect.lua on `resource`; `done` on the strand (malformed: error::unexpected_reply).
/// From any thread.
void read_state(Engine& engine, const std::string& resource,
                std::function<void(boost::system::error_code, Inspection)> done);
/// A refused admin call (`broken`): reported to the observer, and told to `diagnostics` (the
/// one bound to its handler, if any); the caller completes it.
void report_admin_refusal(Engine& engine, AdminCommand command, std::string resource,
                          const Violation& broken, Diagnostics* diagnostics);
/// start_op(Engine&, InspectParams, InspectHandler) (<redis_lock/detail/initiations.hpp>):
/// LockManager::async_inspect: checks the resource (a refusal completes at once), then one
/// read_state. start_op(Engine&, ForceReleaseParams, BoolHandler):
/// LockManager::async_force_release: force_release.lua. From any thread.

}  // namespace redis_lock::detail

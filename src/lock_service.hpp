// SPDX-License-Identifier: MIT
// Layer 4 (engine): the facade behind LockManager and LockGuard. It owns the topology (the
// router, and Redlock's fan-out), the waiters' subscriptions and the renewal watchdog, and
// starts the ops (acquire_op, lease_ops) that do the work. See docs/architecture.md.
#pragma once

#include "admin.hpp"
#include "connection.hpp"
#include "keys.hpp"
#include "lease.hpp"
#include "pending.hpp"
#include "renewal.hpp"
#include "router.hpp"
#include "validate.hpp"
#include "waiters.hpp"

#include <redis_lock/lock.hpp>
#include <redis_lock/observer.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace redis_lock::detail {

struct ScriptOp;
struct AcquireOp;

struct GuardAccess {
  static LockGuard make(std::shared_ptr<LockService> service, std::string resource,
                        std::string token, std::uint64_t fencing_token,
                        std::shared_ptr<LeaseState> lease);
  /// The watchdog stops renewing the guard's lease, which is no longer auto-renewed (after
  /// async_acquire_all renewed the locks it collected, for a caller that did not ask for
  /// renewal). On the strand, before the guard is handed out.
  static void stop_renewing(LockGuard& guard);
  /// An auto-renewed guard's renewal stops at `until` (max_hold from the hand-out).
  static void hold_until(LockGuard& guard, std::chrono::steady_clock::time_point until);
};

class LockService : public std::enable_shared_from_this<LockService> {
 public:
  using Clock = std::chrono::steady_clock;

  LockService(boost::asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options);
  ~LockService();

  /// Registers with the execution context so that its shutdown is noticed; call once.
  void watch_context_shutdown();
  /// Called by the shutdown watch when the context shuts down.
  void on_context_shutdown() noexcept;
  /// False once the context shut down; guards keep it after they are empty.
  ContextAlive context_alive() const noexcept { return context_alive_; }
  /// The context has not shut down (the router and the strand exist). On the strand.
  bool running() const noexcept { return router_ != nullptr; }

  // The operations, callable from any thread.
  void acquire(std::string resource, LockOptions options, LockKind kind, AcquireHandler handler);
  void acquire_all(std::vector<std::string> resources, LockOptions options,
                   AcquireAllHandler handler);
  /// An election's candidate: an acquire of `resource` that records `value` and announces
  /// each change of leader.
  void campaign(std::string resource, std::string value, LockOptions options,
                AcquireHandler handler);
  void inspect(std::string resource, InspectHandler handler);
  void force_release(std::string resource, BoolHandler handler);
  /// Election::async_leader (`wait` false) and async_observe.
  void observe(std::string resource, bool wait, std::uint64_t after_term, EndedTerm ended,
               LeaderHandler handler);
  /// inspect.lua on `resource`; `done` on the strand (malformed: error::unexpected_reply).
  void read_state(const std::string& resource,
                  std::function<void(boost::system::error_code, Inspection)> done);
  /// `by_guard`: a guard's own release (reported to the observer), not a clean-up.
  /// `patience`: a Cluster refusal for a slot in motion (TRYAGAIN, CLUSTERDOWN) is retried
  /// until then at least (the lease's valid_until(): past it the release no longer matters).
  /// `give_back_until` (detached releases only): resent through link failures until then.
  /// `member_suffix`: an acquire's give-back leaves the queue as token + this.
  void release(std::string resource, std::string token, LeaseKind kind, BoolHandler handler,
               bool by_guard = false, Clock::time_point patience = {},
               Clock::time_point give_back_until = {}, std::string_view member_suffix = {});
  void release_detached(std::string resource, std::string token, LeaseKind kind,
                        bool by_guard = false, Clock::time_point patience = {}) noexcept;
  /// Gives back what an acquire with `token` may hold, or the queue place it may have:
  /// a release that is sent again through link failures until `until`, past which the
  /// lease (and the queue entry) has expired anyway. On Redlock, on every master.
  void give_back(std::string resource, std::string token, LeaseKind kind, Clock::time_point until,
                 std::string_view member_suffix) noexcept;
  /// The same give-back written at once on a command connection of `node`, without Asio:
  /// for an op's last words while the context shuts down. False when no link could take it.
  bool give_back_now(std::size_t node, std::string_view resource, std::string_view token,
                     LeaseKind kind, std::string_view member_suffix) noexcept;
  void extend(std::string resource, std::string token, std::shared_ptr<LeaseState> lease,
              std::chrono::milliseconds ttl, BoolHandler handler);
  /// The guard let go of the lease (release, destruction): stop renewing, end waits.
  void forget(const std::shared_ptr<LeaseState>& lease) noexcept;
  void wait_lost(std::shared_ptr<LeaseState> lease, ErrorHandler handler);
  std::string last_server_error() const;
  /// LockManager::cancel(): every pending operation (pending()) ends as its own cancellation
  /// would. Callable from any thread.
  void cancel_all();

  // For the ops, on the strand.
  /// Sends `op` to the node serving its slot, or (Redlock) to every master.
  void send(std::shared_ptr<ScriptOp> op);
  /// WAIT for `replicas` on the connection of `node` that the durable commands use.
  void wait_replicas(std::size_t node, int replicas, std::chrono::milliseconds timeout,
                     Connection::Callback callback);
  /// A give-back's next try after a link failure: `again` on the strand after `delay`, or
  /// false (nothing scheduled) when that would be past `until`.
  bool retry_later(Clock::time_point until, std::chrono::milliseconds delay,
                   std::function<void()> again);
  void watch(const std::shared_ptr<LeaseState>& lease);
  /// The operations under way that cancel_all() ends and the context's shutdown asks for
  /// their last words.
  PendingOps& pending() noexcept { return pending_; }
  void add_waiter(const std::string& token, std::weak_ptr<Waiter> waiter, std::uint16_t slot);
  void remove_waiter(const std::string& token);
  /// The error an error reply stands for (and the manager's last_server_error()).
  boost::system::error_code server_error(const Reply& reply);

  ResourceKeys keys_of(std::string_view resource, LeaseKind kind = LeaseKind::mutex) const;
  /// '<P|S><channel>' on which `resource`'s changes of leader are announced (an election's).
  std::string announce_of(std::string_view resource) const;
  /// ManagerOptions::holder_label.
  const std::string& holder_label() const noexcept { return options_.holder_label; }
  /// The slot that routes the commands on `lease_key` (0 unless on a Cluster).
  std::uint16_t slot_of(std::string_view lease_key) const noexcept;
  bool redlock() const noexcept { return config_.topology == Topology::redlock; }
  bool cluster() const noexcept { return config_.topology == Topology::cluster; }
  Router& router() const noexcept { return *router_; }
  Waiters& waiters() const noexcept { return *waiters_; }
  Watchdog& watchdog() noexcept { return watchdog_; }
  const boost::asio::any_io_executor& executor() const noexcept { return executor_; }
  Observer* observer() const noexcept { return options_.observer.get(); }
  const Connection::Strand& strand() const noexcept { return *strand_; }

 private:
  template <class Fn>
  void on_strand(Fn&& fn);
  /// Starts a checked acquire (the token, the deadline, cancellation, the first attempt).
  void start(std::shared_ptr<AcquireOp> op);
  /// An admin op's refusal (config, resource, Redlock), or none.
  Violation check_admin_call(std::string_view resource) const;
  /// Reports a refused acquire to the observer and completes it (nothing was sent).
  void refuse(std::string resource, boost::system::error_code ec, std::string_view why,
              AcquireHandler handler);
  /// Reports a refused acquire to the observer (nothing was sent).
  void report_refusal(std::string resource, boost::system::error_code ec, std::string_view why);

  boost::asio::any_io_executor executor_;
  ManagerOptions options_;
  ConnectionConfig config_;
  std::shared_ptr<boost::asio::ssl::context> tls_;  // rediss://, shared by our connections
  boost::system::error_code config_error_;          // config_ unusable: every acquire fails with it
  std::string_view config_rule_;                    // ... and the rule it broke
  // Reset when the context shuts down: a strand's state belongs to a service of the
  // context, and guards may keep this object alive after the context is gone.
  std::optional<Connection::Strand> strand_;
  std::shared_ptr<Router> router_;  // null once the execution context shut down
  std::shared_ptr<Waiters> waiters_;
  Watchdog watchdog_{*this};
  PendingOps pending_;
  std::atomic<bool> alive_{true};
  std::shared_ptr<std::atomic<bool>> context_alive_ = std::make_shared<std::atomic<bool>>(true);
  mutable std::mutex error_mutex_;
  std::string last_server_error_;
};

/// Installs an operation's cancellation handler in the slot its completion handler carries,
/// if any, in the initiating call (see LockService::start). A cancellation reaches
/// `op->cancel()` on the manager's strand while the op lives. The handler holds the op and
/// the manager weakly and nothing else: the caller's signal may destroy it after the
/// io_context (an op dropped at shutdown never cleared it), and a strand destroyed then
/// touched the context's freed state. Cleared by complete() (completion.hpp).
template <class Handler, class Op>
void install_cancellation(Handler& handler, const std::shared_ptr<Op>& op) {
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  if (!slot.is_connected()) return;
  slot.assign([weak = std::weak_ptr<Op>(op),
               manager = std::weak_ptr<LockService>(op->service)](boost::asio::cancellation_type) {
    const auto service = manager.lock();
    if (!service || !service->context_alive()->load() || weak.expired()) return;
    boost::asio::post(service->strand(), [weak] {
      if (auto alive = weak.lock()) alive->cancel();
    });
  });
}

/// A guard completes on its manager's executor, also once it is empty.
inline LockGuard GuardAccess::make(std::shared_ptr<LockService> service, std::string resource,
                                   std::string token, std::uint64_t fencing_token,
                                   std::shared_ptr<LeaseState> lease) {
  auto executor = service->executor();
  auto alive = service->context_alive();
  return LockGuard(std::move(service), std::move(executor), std::move(alive), std::move(resource),
                   std::move(token), fencing_token, std::move(lease));
}

inline void GuardAccess::stop_renewing(LockGuard& guard) {
  if (!guard.service_ || !guard.lease_) return;
  guard.service_->watchdog().unwatch(*guard.lease_);
  guard.lease_->auto_renew = false;
}

inline void GuardAccess::hold_until(LockGuard& guard, std::chrono::steady_clock::time_point until) {
  if (guard.lease_) guard.lease_->hold_until = until;
}

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// Layer 4 (engine): the context every op runs in. It owns the topology (the router, and
// Redlock's fan-out), the waiters' subscriptions, the renewal watchdog and the list of ops
// under way, and gives the ops the strand, sending, naming (keys, slots, channels), the
// observer and the server's errors. Ops include this, never the facade (lock_service.hpp),
// which only starts them. See docs/architecture.md.
#pragma once

#include "connection.hpp"
#include "keys.hpp"
#include "lease.hpp"
#include "pending.hpp"
#include "renewal.hpp"
#include "router.hpp"
#include "validate.hpp"
#include "waiters.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/detail/grant.hpp>
#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/lock_kind.hpp>
#include <redis_lock/diagnostics.hpp>
#include <redis_lock/observer.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace redis_lock::detail {

struct ScriptOp;
class Engine;

class Engine : public std::enable_shared_from_this<Engine>, private RenewalHost {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~Engine();

  /// Registers with the execution context so that its shutdown is noticed; call once.
  void watch_context_shutdown();
  /// Called by the shutdown watch when the context shuts down.
  void on_context_shutdown() noexcept;
  /// False once the context shut down; guards keep it after they are empty.
  ContextAlive context_alive() const noexcept { return context_alive_; }
  /// The context has not shut down (the router and the strand exist). On the strand.
  bool running() const noexcept { return router_ != nullptr; }

  /// False once the context shut down: new operations are dropped (as Asio drops handlers).
  bool alive() const noexcept { return alive_.load(); }
  /// The configuration's fault, if it cannot work: every acquire fails with it.
  Violation config_violation() const noexcept { return {config_error_, config_rule_}; }
  /// The deployment's shape (topology.hpp): every question that differs between topologies.
  const Shape& shape() const noexcept { return *shape_; }
  std::size_t node_count() const noexcept { return config_.nodes.size(); }

  // Callable from any thread.
  /// A release of `token`'s lease on `resource`: what it is for and how hard it tries.
  struct ReleaseRequest {
    std::string resource;
    std::string token;
    AcquireKind kind = AcquireKind::mutex;
    /// A guard's own release (reported to the observer), not a clean-up.
    bool by_guard = false;
    /// A Cluster refusal for a slot in motion (TRYAGAIN, CLUSTERDOWN) is retried until then
    /// at least (the lease's valid_until(): past it the release no longer matters). With a
    /// handler, a reply that comes late is waited for until then too.
    Clock::time_point patience{};
    /// Resent through link failures until then (none: not resent).
    Clock::time_point give_back_until{};
    /// An acquire's give-back leaves the queue as token + this.
    std::string_view member_suffix{};
    /// A lease whose hold ends with this release, reported to the observer (on_hold_end) on
    /// the strand, as the release is sent.
    std::shared_ptr<LeaseState> ended{};
    /// Bound to the handler (bind_diagnostics): told a failure's detail.
    Diagnostics* diagnostics = nullptr;
  };
  /// Sends `request`; its answer goes to `handler` (none: a release nobody waits for).
  void release(ReleaseRequest request, BoolHandler handler);
  /// A holder (a guard, or a grant on its way) lets go of `lease` (may be null): stops its
  /// renewal and releases it, through `handler` (async_release) or, without one, detached
  /// (resent through link failures while the lease may be valid). Its hold's end goes to the
  /// observer with the release, if its acquire was reported.
  void release_held(std::string resource, std::string token, std::shared_ptr<LeaseState> lease,
                    BoolHandler handler, Diagnostics* diagnostics = nullptr);
  /// Gives back what an acquire with `token` may hold, or the queue place it may have:
  /// a release that is sent again through link failures until `until`, past which the
  /// lease (and the queue entry) has expired anyway. On Redlock, on every master.
  void give_back(std::string resource, std::string token, AcquireKind kind, Clock::time_point until,
                 std::string_view member_suffix) noexcept;
  /// The same give-back written at once on a command connection of `node`, without Asio:
  /// for an op's last words while the context shuts down. False when no link could take it.
  /// `behind`: the connection an attempt is still in flight on, which the give-back must
  /// follow; none in flight: either.
  bool give_back_now(std::size_t node, std::optional<Router::Pool> behind,
                     std::string_view resource, std::string_view token, AcquireKind kind,
                     std::string_view member_suffix) noexcept;
  /// The guard let go of the lease (release, destruction): stop renewing, end waits. A
  /// lease already lost when let go (LeaseState::known_lost: its validity passed unrenewed)
  /// ends as lost, not as released: its wait completes with lock_lost and the observer hears
  /// the loss and the hold's end as lost. Returns true when that loss was handed to the
  /// strand (which then reports the hold's end).
  bool forget(const std::shared_ptr<LeaseState>& lease) noexcept;
  /// A held lease's end, told to the observer (if there is one). On the strand.
  void report_hold_end(const LeaseState& lease, HoldEnd end) noexcept;
  std::string last_server_error() const;
  /// LockManager::cancel(): every pending operation (pending()) ends as its own cancellation
  /// would. Callable from any thread.
  void cancel_all();

  // For the ops, on the strand.
  /// Sends `op` as the shape sends a script call (to the node serving its slot, or to every
  /// master for a vote).
  void send(std::shared_ptr<ScriptOp> op);
  /// Whether `replicas` replicas have what was written so far on the connection of `node`
  /// that the durable commands use (WAIT, answered within `timeout`). The one policy of
  /// every write that must be replicated (acquire, extend, renewal, idempotency records):
  /// none when enough acknowledged it; not_replicated when fewer did; for an error reply
  /// (a user without +wait: NOPERM), the server's error, its text as `detail` (and the
  /// manager's last_server_error()); unexpected_reply; or the connection's error.
  using Confirmed =
      boost::asio::any_completion_handler<void(boost::system::error_code, std::string_view)>;
  void confirm_replicas(std::size_t node, int replicas, std::chrono::milliseconds timeout,
                        Confirmed done);
  /// A give-back's next try after a link failure: `again` on the strand after `delay`, or
  /// false (nothing scheduled) when that would be past `until`.
  bool retry_later(Clock::time_point until, std::chrono::milliseconds delay,
                   std::function<void()> again);
  void watch(const std::shared_ptr<LeaseState>& lease);
  /// The watchdog stops renewing `lease`, which is no longer auto-renewed (after
  /// async_acquire_all renewed the locks it collected, for a caller that did not ask for
  /// renewal). On the strand, before the grant is handed out.
  void stop_renewing(LeaseState& lease);
  /// The operations under way that cancel_all() ends and the context's shutdown asks for
  /// their last words.
  PendingOps& pending() noexcept { return pending_; }
  void add_waiter(const std::string& token, std::weak_ptr<Waiter> waiter, std::uint16_t slot);
  void remove_waiter(const std::string& token);
  /// The error an error reply stands for (and the manager's last_server_error()).
  boost::system::error_code server_error(const Reply& reply);

  ResourceKeys keys_of(std::string_view resource, AcquireKind kind = AcquireKind::mutex) const;
  /// '<P|S><channel>' on which `resource`'s changes of leader are announced (an election's).
  std::string announce_of(std::string_view resource) const;
  /// '<P|S><channel prefix>' of the managers whose waiters queue in `slot`: a release hands
  /// on to the next one on the prefix + its manager id (PUBLISH; SPUBLISH on a Cluster, the
  /// channel carrying the slot's hash tag).
  std::string notify_of(std::uint16_t slot) const;
  /// ManagerOptions::key_prefix.
  const std::string& key_prefix() const noexcept { return options_.key_prefix; }
  /// ManagerOptions::holder_label.
  const std::string& holder_label() const noexcept { return options_.holder_label; }
  /// The slot that routes the commands on `lease_key` (0 unless on a Cluster).
  std::uint16_t slot_of(std::string_view lease_key) const noexcept;
  Router& router() const noexcept { return *router_; }
  Waiters& waiters() const noexcept { return *waiters_; }
  Watchdog& watchdog() noexcept { return watchdog_; }
  const boost::asio::any_io_executor& executor() const noexcept { return executor_; }
  Observer* observer() const noexcept { return options_.observer.get(); }
  const Connection::Strand& strand() const noexcept { return *strand_; }

  /// Runs `fn` on the strand: at once when called there, else posted.
  template <class Fn>
  void on_strand(Fn&& fn);
  /// An admin op's refusal (config, resource, shape), or none.
  Violation check_admin_call(std::string_view resource) const;
  /// Reports a refused acquire (of `kind`) to the observer and completes it (nothing was
  /// sent).
  void refuse(std::string resource, boost::system::error_code ec, std::string_view why,
              AcquireHandler handler, AcquireKind kind = AcquireKind::mutex,
              Diagnostics* diagnostics = nullptr);
  /// Reports a refused acquire to the observer, and tells `diagnostics` (the one bound to its
  /// handler, if any) the same rule (nothing was sent).
  void report_refusal(std::string resource, boost::system::error_code ec, std::string_view why,
                      AcquireKind kind = AcquireKind::mutex, Diagnostics* diagnostics = nullptr);
  /// Reports a release's, an extension's or a touch's refusal before anything was sent (a
  /// LeaseEvent: not succeeded, `ec`, the rule as its detail), and tells `diagnostics` the
  /// same rule.
  void report_lease_refusal(std::string resource, LeaseCommand command,
                            boost::system::error_code ec, std::string_view why,
                            Diagnostics* diagnostics = nullptr);
  /// Reports a completed admin operation (inspect, force-release, leader, observe) to the
  /// observer, if there is one, on the strand. `detail`: the rule or the server's reply.
  void report_admin(AdminCommand command, std::string resource, boost::system::error_code ec,
                    std::chrono::steady_clock::time_point started, std::string detail);

 protected:
  /// Only as a LockService (the facade), which a guard's public layer relies on.
  Engine(boost::asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options);

 private:
  // What the watchdog needs of its manager (RenewalHost), and no more.
  const Connection::Strand& timer_strand() const noexcept override { return *strand_; }
  std::weak_ptr<void> lifetime() noexcept override { return weak_from_this(); }
  void send_renewal(const std::shared_ptr<LeaseState>& lease, Watchdog& watchdog,
                    Clock::time_point sent) override;
  Observer* renewal_observer() const noexcept override { return observer(); }
  void hold_lost(const LeaseState& lease) noexcept override {
    report_hold_end(lease, HoldEnd::lost);
  }
  const boost::asio::any_io_executor& waiter_executor() const noexcept override {
    return executor_;
  }

  boost::asio::any_io_executor executor_;
  ManagerOptions options_;
  ConnectionConfig config_;
  const Shape* shape_;  // never null (standalone's when the config names no known topology)
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
  /// The text of the last error reply (or refused handshake): shared with the connections'
  /// refusal handlers, which may outlive the engine by a late reply.
  struct LastError {
    std::mutex mutex;
    std::string text;
    void set(std::string_view said) {
      if (said.empty()) return;  // keep the last words that said something
      std::lock_guard lock(mutex);
      text = said;
    }
  };
  std::shared_ptr<LastError> last_error_ = std::make_shared<LastError>();
  /// The server notices said so far (on the strand): an evicting server once per address
  /// and text, an unknown policy once.
  struct SaidNotices {
    std::set<std::string> evicting;
    bool unknown = false;
    bool first_time(const ServerNotice& notice);
  };
};

/// Installs an operation's cancellation handler in the slot its completion handler carries,
/// if any, in the initiating call (see acquire_op.cpp's start_op). A cancellation reaches
/// `op->cancel()` on the manager's strand while the op lives. The handler holds the op and
/// the manager weakly and nothing else: the caller's signal may destroy it after the
/// io_context (an op dropped at shutdown never cleared it), and a strand destroyed then
/// touched the context's freed state. Cleared by complete() (completion.hpp).
template <class Handler, class Op>
void install_cancellation(Handler& handler, const std::shared_ptr<Op>& op) {
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  if (!slot.is_connected()) return;
  slot.assign([weak = std::weak_ptr<Op>(op),
               manager = std::weak_ptr<Engine>(op->service)](boost::asio::cancellation_type) {
    const auto service = manager.lock();
    if (!service || !service->context_alive()->load() || weak.expired()) return;
    boost::asio::post(service->strand(), [weak] {
      if (auto alive = weak.lock()) alive->cancel();
    });
  });
}

template <class Fn>
void Engine::on_strand(Fn&& fn) {
  // dispatch: a command issued from a completion handler (already on the strand) is queued
  // at once and joins the write of its neighbours; from elsewhere it is posted.
  boost::asio::dispatch(*strand_, std::forward<Fn>(fn));
}

}  // namespace redis_lock::detail

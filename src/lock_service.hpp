// SPDX-License-Identifier: MIT
// Layers 4-5: the single-authority lock engine behind LockManager and LockGuard.
#pragma once

#include "connection.hpp"
#include "quorum.hpp"
#include "router.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <redis_lock/lock.hpp>
#include <redis_lock/observer.hpp>

#include <array>
#include <functional>
#include <atomic>
#include <span>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace redis_lock::detail {

struct ScriptOp;
struct Script;
struct OwnedCommand;
struct CompareOp;

/// What a guard and the manager's renewal watchdog share about one held lease.
/// Atomics may be read from the guard's thread; everything else lives on the strand.
struct LeaseState {
  using Clock = std::chrono::steady_clock;

  std::string resource;
  std::string token;
  std::chrono::milliseconds ttl{};
  std::chrono::milliseconds renew_every{};
  Clock::time_point hold_until = Clock::time_point::max();
  bool auto_renew = false;
  // min_replicas of the acquire: renewals and extensions count only once WAIT confirms them.
  int min_replicas = 0;
  std::chrono::milliseconds replication_timeout{};

  std::atomic<Clock::rep> valid_until_ticks{0};
  std::atomic<bool> lost{false};
  std::atomic<bool> released{false};
  std::atomic<bool> has_waiter{false};

  // Strand only.
  std::shared_ptr<ScriptOp> renewal;  // built once, reused for every renewal
  bool renewing = false;
  bool scheduled = false;
  std::multimap<Clock::time_point, std::shared_ptr<LeaseState>>::iterator schedule_entry;
  boost::asio::cancellation_signal signal;
  std::optional<ErrorHandler> lost_waiter;  // emplaced, never assigned (Boost 1.81)

  Clock::time_point valid_until() const noexcept {
    return Clock::time_point(Clock::duration(valid_until_ticks.load()));
  }
  /// `started` is when the command that set the ttl was issued; less the drift margin.
  void confirm(Clock::time_point started, std::chrono::milliseconds lease_ttl) noexcept {
    valid_until_ticks.store(
        (started + lease_ttl - drift_margin(lease_ttl)).time_since_epoch().count());
  }
};

struct GuardAccess {
  static LockGuard make(std::shared_ptr<LockService> service, std::string resource,
                        std::string token, std::uint64_t fencing_token,
                        std::shared_ptr<LeaseState> lease);
};

class LockService : public std::enable_shared_from_this<LockService> {
 public:
  LockService(boost::asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options);
  ~LockService();

  /// Registers with the execution context so that its shutdown is noticed; call once.
  void watch_context_shutdown();

  // Callable from any thread.
  void acquire(std::string resource, LockOptions options, AcquireHandler handler);
  /// `by_guard`: a guard's own release (reported to the observer), not a clean-up.
  /// `patience`: a Cluster refusal for a slot in motion (TRYAGAIN, CLUSTERDOWN) is retried
  /// until then at least (the lease's valid_until(): past it the release no longer matters).
  /// `give_back_until` (detached releases only): resent through link failures until then.
  void release(std::string resource, std::string token, BoolHandler handler,
               bool by_guard = false,
               std::chrono::steady_clock::time_point patience = {},
               std::chrono::steady_clock::time_point give_back_until = {});
  void release_detached(std::string resource, std::string token, bool by_guard = false,
                        std::chrono::steady_clock::time_point patience = {}) noexcept;
  /// Gives back what an acquire with `token` may hold, or the queue place it may have:
  /// a release that is sent again through link failures until `until`, past which the
  /// lease (and the queue entry) has expired anyway. On Redlock, on every master.
  void give_back(std::string resource, std::string token,
                 std::chrono::steady_clock::time_point until) noexcept;
  /// A give-back's next try after a link failure: `again` on the strand after `delay`, or
  /// false (nothing scheduled) when that would be past `until`.
  bool retry_later(std::chrono::steady_clock::time_point until, std::chrono::milliseconds delay,
                   std::function<void()> again);
  /// Redlock: the same on master `node` alone.
  void give_back_on(std::size_t node, std::string_view resource, std::string_view token,
                    std::chrono::steady_clock::time_point until);
  void extend(std::string resource, std::string token, std::shared_ptr<LeaseState> lease,
              std::chrono::milliseconds ttl, BoolHandler handler);
  /// The guard let go of the lease (release, destruction): stop renewing, end waits.
  void forget(const std::shared_ptr<LeaseState>& lease) noexcept;
  void wait_lost(std::shared_ptr<LeaseState> lease, ErrorHandler handler);

  // Renewal watchdog (on the strand).
  void watch(const std::shared_ptr<LeaseState>& lease);
  void mark_lost(const std::shared_ptr<LeaseState>& lease);
  void renewed(const std::shared_ptr<LeaseState>& lease, std::chrono::steady_clock::time_point sent,
               boost::system::error_code ec, const Reply& reply,
               std::span<const NodeResult> nodes = {});
  std::string last_server_error() const;

  /// Called by our execution_context service when the context shuts down.
  void on_context_shutdown() noexcept;
  /// False once the context shut down; guards keep it after they are empty.
  ContextAlive context_alive() const noexcept { return context_alive_; }

  // Waiting (on the strand): a waiter is told by a message on this manager's notify channel
  // when a release hands it the lease.
  void add_waiter(const std::shared_ptr<struct AcquireOp>& op);
  void remove_waiter(const std::string& token);
  const std::string& member_suffix() const noexcept { return manager_id_; }
  /// Whether a release of a lease in `slot` would reach us at once.
  bool listening(std::uint16_t slot) const noexcept;
  bool redlock() const noexcept { return config_.topology == Topology::redlock; }
  bool cluster() const noexcept { return config_.topology == Topology::cluster; }
  /// The slot that routes the commands on `lease_key` (0 unless on a Cluster).
  std::uint16_t slot_of(std::string_view lease_key) const noexcept;

  // Used by the script operations (on the strand).
  /// Sends `op` to the node serving its slot; `ask_node`: once to that node, after ASKING.
  void send(std::shared_ptr<ScriptOp> op, std::size_t ask_node = Router::no_node);
  /// WAIT for `replicas` on the connection of `node` that the durable acquires use.
  void wait_replicas(std::size_t node, int replicas, std::chrono::milliseconds timeout,
                     Connection::Callback callback);
  boost::system::error_code server_error(const Reply& reply);
  const boost::asio::any_io_executor& executor() const noexcept { return executor_; }
  Observer* observer() const noexcept { return options_.observer.get(); }
  const Connection::Strand& strand() const noexcept { return *strand_; }

 private:
  template <class Fn>
  void on_strand(Fn&& fn);

  boost::asio::any_io_executor executor_;
  ManagerOptions options_;
  ConnectionConfig config_;
  std::shared_ptr<boost::asio::ssl::context> tls_;  // rediss://, shared by our connections
  boost::system::error_code config_error_;  // config_ unusable: every acquire fails with it
  void subscribe(std::uint16_t slot, int redirects = 0);
  /// Fills in a release (compare-and-delete, hand-off, queue exit) of `token`'s lease.
  void prepare_release(CompareOp& op, std::string resource, std::string token);
  /// Our channel for waiters in `slot` is this + manager id (the slot's tag on a Cluster).
  std::string notify_channel_prefix(std::uint16_t slot) const;
  void on_notify(const Reply& push);
  void on_subscriber_down(std::size_t node);
  /// A redirection or a transient Cluster refusal: resends `op` and returns true, or returns
  /// false when the reply is final (not one of those, or out of redirections and time).
  bool redirected(std::shared_ptr<ScriptOp>& op, const Reply& reply);
  // Redlock: `op` goes to every master; a majority decides.
  friend struct QuorumCall;
  void send_to_all(std::shared_ptr<ScriptOp> op);
  /// Runs a script on master `node`: EVALSHA, or once EVAL with the body after NOSCRIPT.
  /// `command` owns every byte, so a resend never reads what a later attempt replaced.
  void eval_on(std::size_t node, const Script& script,
               std::shared_ptr<const OwnedCommand> command, Connection::Callback callback,
               std::shared_ptr<LateReplies> late = nullptr, bool with_body = false);
  void give_back_on(std::size_t node, std::shared_ptr<const OwnedCommand> release,
                    std::chrono::steady_clock::time_point until,
                    std::chrono::milliseconds backoff);

  void schedule(const std::shared_ptr<LeaseState>& lease, std::chrono::steady_clock::time_point at);
  void unschedule(LeaseState& lease);
  void arm_renew_timer(std::chrono::steady_clock::time_point at);
  void on_renew_timer();
  void renew(const std::shared_ptr<LeaseState>& lease);

  // Reset when the context shuts down: a strand's state belongs to a service of the
  // context, and guards may keep this object alive after the context is gone.
  std::optional<Connection::Strand> strand_;
  std::shared_ptr<Router> router_;  // null once the execution context shut down
  std::string manager_id_;     // 16 hex digits; queue members are token + manager id
  // <prefix>notify:  (+ manager id = our channel). On a Cluster each slot has its own
  // channel, <prefix>notify:{<slot tag>}<manager id>, which the release script publishes
  // on with SPUBLISH from inside the slot; a waiter subscribes to its lease's slot.
  std::string notify_prefix_;
  struct Subscription {
    enum class State { none, pending, confirmed } state = State::none;
    std::size_t node = Router::no_node;
  };
  std::unordered_map<std::uint16_t, Subscription> subscriptions_;  // by slot (0: standalone)
  std::unordered_map<std::string, std::weak_ptr<struct AcquireOp>> waiters_;  // by token
  // Renewal watchdog: one timer for all auto-renewed leases, at the earliest due time; all
  // renewals due together go out in one pipelined write.
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<LeaseState>> renewals_;
  std::unique_ptr<boost::asio::steady_timer> renew_timer_;
  std::chrono::steady_clock::time_point renew_timer_at_{};
  bool renew_armed_ = false;
  std::atomic<bool> alive_{true};
  std::shared_ptr<std::atomic<bool>> context_alive_ = std::make_shared<std::atomic<bool>>(true);
  mutable std::mutex error_mutex_;
  std::string last_server_error_;
};

/// A guard completes on its manager's executor, also once it is empty.
inline LockGuard GuardAccess::make(std::shared_ptr<LockService> service, std::string resource,
                                   std::string token, std::uint64_t fencing_token,
                                   std::shared_ptr<LeaseState> lease) {
  auto executor = service->executor();
  auto alive = service->context_alive();
  return LockGuard(std::move(service), std::move(executor), std::move(alive),
                   std::move(resource), std::move(token), fencing_token, std::move(lease));
}

}  // namespace redis_lock::detail

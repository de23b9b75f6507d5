// SPDX-License-Identifier: MIT
// Layers 4-5: the single-authority lock engine behind LockManager and LockGuard.
#pragma once

#include "connection.hpp"

#include <redis_lock/lock.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace redis_lock::detail {

struct ScriptOp;

struct GuardAccess {
  static LockGuard make(std::shared_ptr<LockService> service, std::string resource,
                        std::string token, std::uint64_t fencing_token) {
    return LockGuard(std::move(service), std::move(resource), std::move(token), fencing_token);
  }
  static void take(LockGuard& guard, std::shared_ptr<LockService>& service, std::string& resource,
                   std::string& token) {
    service = std::move(guard.service_);
    resource = std::move(guard.resource_);
    token = std::move(guard.token_);
    guard.service_.reset();
    guard.fencing_token_ = 0;
  }
};

class LockService : public std::enable_shared_from_this<LockService> {
 public:
  LockService(boost::asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options);
  ~LockService();

  /// Registers with the execution context so that its shutdown is noticed; call once.
  void watch_context_shutdown();

  // Callable from any thread.
  void acquire(std::string resource, LockOptions options, AcquireHandler handler);
  void release(std::string resource, std::string token, BoolHandler handler);
  void release_detached(std::string resource, std::string token) noexcept;
  void extend(std::string resource, std::string token, std::chrono::milliseconds ttl,
              BoolHandler handler);
  std::string last_server_error() const;

  /// Called by our execution_context service when the context shuts down.
  void on_context_shutdown() noexcept;

  // Waiting (on the strand): a waiter is told by a message on this manager's notify channel
  // when a release hands it the lease.
  void add_waiter(const std::shared_ptr<struct AcquireOp>& op);
  void remove_waiter(const std::string& token);
  const std::string& member_suffix() const noexcept { return manager_id_; }
  bool listening() const noexcept { return subscription_ == Subscription::confirmed; }
  const std::string& notify_prefix() const noexcept { return notify_prefix_; }

  // Used by the script operations (on the strand).
  void send(std::shared_ptr<ScriptOp> op);
  boost::system::error_code server_error(const Reply& reply);
  const boost::asio::any_io_executor& executor() const noexcept { return executor_; }
  const ManagerOptions& options() const noexcept { return options_; }
  const Connection::Strand& strand() const noexcept { return connection_->strand(); }

 private:
  template <class Fn>
  void on_strand(Fn&& fn);

  boost::asio::any_io_executor executor_;
  ManagerOptions options_;
  ConnectionConfig config_;
  void subscribe();
  void on_notify(const Reply& push);

  std::shared_ptr<Connection> connection_;
  std::string manager_id_;     // 16 hex digits; queue members are token + manager id
  std::string notify_prefix_;  // <prefix>notify:  (+ manager id = our channel)
  std::shared_ptr<Connection> subscriber_;  // created with the first waiter
  enum class Subscription { none, pending, confirmed } subscription_ = Subscription::none;
  std::unordered_map<std::string, std::weak_ptr<struct AcquireOp>> waiters_;  // by token
  std::atomic<bool> alive_{true};
  mutable std::mutex error_mutex_;
  std::string last_server_error_;
};

}  // namespace redis_lock::detail

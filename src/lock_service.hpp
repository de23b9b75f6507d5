// SPDX-License-Identifier: MIT
// Layer 4 (engine): the facade behind LockManager, LockGuard and Election: one Engine (the
// context the ops share, engine.hpp) whose entry points start the ops. Only the public layer
// (lock.cpp, election.cpp) includes this; an op includes engine.hpp. See docs/architecture.md.
#pragma once

#include "engine.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/lock_kind.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace redis_lock::detail {

class LockService final : public Engine {
 public:
  LockService(boost::asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options)
      : Engine(std::move(ex), std::move(config), std::move(options)) {}

  // The operations, callable from any thread. Each checks its arguments (a refusal completes
  // at once, nothing sent) and starts its op on the strand.
  void acquire(std::string resource, LockOptions options, LockKind kind, AcquireHandler handler);
  void acquire_all(std::vector<std::string> resources, LockOptions options,
                   AcquireAllHandler handler);
  void inspect(std::string resource, InspectHandler handler);
  void force_release(std::string resource, BoolHandler handler);
  void extend(std::string resource, std::string token, std::shared_ptr<LeaseState> lease,
              std::chrono::milliseconds ttl, BoolHandler handler);
  void wait_lost(std::shared_ptr<LeaseState> lease, ErrorHandler handler);
};

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// Layer 4 (engine): the facade behind LockManager, LockGuard and Election: the Engine (the
// context the ops share, engine.hpp) the public layer starts operations on (engine_of, then
// each operation's start_op). Only the public layer (lock.cpp, election.cpp, idempotency*)
// includes this; an op includes engine.hpp. See docs/architecture.md.
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
};

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// Helpers for live tests of semaphores, read-write locks and async_acquire_all: what the
// server holds, and the outcome of an acquire started on a Background's io_context.
#pragma once

#include "keys.hpp"
#include "live.hpp"

#include <future>
#include <memory>
#include <string>
#include <utility>

namespace redis_lock::test {

using boost::system::error_code;

inline detail::ResourceKeys set_keys(const std::string& resource) {
  return detail::make_keys("lock:", resource, /*lease_set=*/true);
}

/// Holders of a lease set on the server (its zset less the kind's marker).
inline int holders(std::uint16_t port, const std::string& resource) {
  const auto n = std::stoi(redis_command(port, {"ZCARD", lease_key(resource)}));
  return n > 0 ? n - 1 : 0;
}

/// Waiters in a lease set's queue.
inline int queued(std::uint16_t port, const std::string& resource) {
  return std::stoi(redis_command(port, {"ZCARD", set_keys(resource).queue()}));
}

using Pending = std::future<LockGuard>;

/// The error and result an acquire completes with: `start(handler)` starts it (on a
/// Background's io_context). Bounded: 10 s.
template <class Result = LockGuard, class Start>
std::pair<error_code, Result> outcome(Start start) {
  auto promise = std::make_shared<std::promise<std::pair<error_code, Result>>>();
  auto result = promise->get_future();
  start([promise](error_code ec, Result r) { promise->set_value({ec, std::move(r)}); });
  if (result.wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "the acquire did not complete";
    return {error::timeout, Result{}};
  }
  return result.get();
}

}  // namespace redis_lock::test

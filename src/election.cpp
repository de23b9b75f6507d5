// SPDX-License-Identifier: MIT
// Layer 5 (public API): Election. A candidate is an acquire of the election's lease
// (acquire_op.cpp's start_op(CampaignParams)); an observer is an ObserveOp (observe_op.hpp).
#include <redis_lock/election.hpp>

#include "acquire_op.hpp"
#include "lock_service.hpp"
#include "observe_op.hpp"

namespace redis_lock {

Election::Election(LockManager& locks, std::string name)
    : service_(locks.service_),
      executor_(locks.executor_),
      context_alive_(locks.context_alive_),
      name_(std::move(name)),
      resource_(name_.empty() ? std::string() : "election:" + name_),
      ended_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

}  // namespace redis_lock

// SPDX-License-Identifier: MIT
// Layer 5 (public API): Election. A candidate is an acquire of the election's lease
// (acquire_op.hpp's start_campaign); an observer is an ObserveOp (observe_op.hpp).
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

void Election::campaign_impl(std::shared_ptr<detail::LockService> service, std::string resource,
                             std::string value, LockOptions options,
                             detail::AcquireHandler handler) {
  detail::start_campaign(*service, std::move(resource), std::move(value), options,
                         std::move(handler));
}

void Election::observe_impl(std::shared_ptr<detail::LockService> service, std::string resource,
                            bool wait, std::uint64_t after_term, detail::EndedTerm ended,
                            detail::LeaderHandler handler) {
  detail::start_observe(*service, std::move(resource), wait, after_term, std::move(ended),
                        std::move(handler));
}

}  // namespace redis_lock

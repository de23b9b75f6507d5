// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/election.hpp>, not API: the call operators of the
// election's initiations, which need the complete Election.
#pragma once

#include <redis_lock/election.hpp>
#include <redis_lock/error.hpp>

#include <optional>
#include <string>
#include <utility>

namespace redis_lock {
namespace detail {

template <class Handler>
void initiate_campaign::operator()(Handler handler, std::shared_ptr<LockService> service,
                                   std::string resource, std::string value,
                                   LockOptions options) const {
  if (!service) {
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(error::invalid_argument), LockGuard{});
  }
  Election::campaign_impl(std::move(service), std::move(resource), std::move(value), options,
                          AcquireHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_observe::operator()(Handler handler, std::shared_ptr<LockService> service,
                                  std::string resource, bool wait, std::uint64_t after_term,
                                  EndedTerm ended) const {
  if (!service) {
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(error::invalid_argument),
                                 std::optional<Leader>{});
  }
  Election::observe_impl(std::move(service), std::move(resource), wait, after_term,
                         std::move(ended), LeaderHandler(slot_clearing(std::move(handler))));
}

}  // namespace detail
}  // namespace redis_lock

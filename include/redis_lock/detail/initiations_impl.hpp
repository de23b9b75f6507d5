// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: the call operators of the
// initiations declared in <redis_lock/detail/initiations.hpp>, which need the complete
// LockGuard and LockManager. Each completes an operation that has nothing to work on here,
// where the handler's type is known, and hands any other to the compiled library as a
// type-erased handler.
#pragma once

#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/initiations.hpp>
#include <redis_lock/error.hpp>
#include <redis_lock/lock.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace redis_lock::detail {

template <class Handler>
void initiate_acquire::operator()(Handler handler, std::shared_ptr<LockService> service,
                                  std::string resource, LockOptions options, LockKind kind) const {
  if (!service) {  // a moved-from manager
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(error::invalid_argument), LockGuard{});
  }
  LockManager::acquire_impl(std::move(service), std::move(resource), options, kind,
                            AcquireHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_acquire_all::operator()(Handler handler, std::shared_ptr<LockService> service,
                                      std::vector<std::string> resources,
                                      LockOptions options) const {
  if (!service) {  // a moved-from manager
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(error::invalid_argument),
                                 std::vector<LockGuard>{});
  }
  LockManager::acquire_all_impl(std::move(service), std::move(resources), options,
                                AcquireAllHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_release::operator()(Handler handler, LockGuard guard) const {
  if (!guard.owns_lock()) {
    return complete_without_lock(io_, alive_, std::move(handler), boost::system::error_code{},
                                 false);
  }
  LockGuard::release_impl(std::move(guard), BoolHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_extend::operator()(Handler handler, std::shared_ptr<LockService> service,
                                 std::string resource, std::string token,
                                 std::shared_ptr<LeaseState> lease,
                                 std::chrono::milliseconds ttl) const {
  if (!service) {
    return complete_without_lock(io_, alive_, std::move(handler), boost::system::error_code{},
                                 false);
  }
  LockGuard::extend_impl(std::move(service), std::move(resource), std::move(token),
                         std::move(lease), ttl, BoolHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_wait_lost::operator()(Handler handler, std::shared_ptr<LockService> service,
                                    std::shared_ptr<LeaseState> lease) const {
  if (!service || !lease) {
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(boost::asio::error::operation_aborted));
  }
  LockGuard::wait_lost_impl(std::move(service), std::move(lease),
                            ErrorHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_inspect::operator()(Handler handler, std::shared_ptr<LockService> service,
                                  std::string resource) const {
  if (!service) {
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(error::invalid_argument), LockInfo{});
  }
  LockManager::inspect_impl(std::move(service), std::move(resource),
                            InspectHandler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_force_release::operator()(Handler handler, std::shared_ptr<LockService> service,
                                        std::string resource) const {
  if (!service) {
    return complete_without_lock(io_, alive_, std::move(handler),
                                 boost::system::error_code(error::invalid_argument), false);
  }
  LockManager::force_release_impl(std::move(service), std::move(resource),
                                  BoolHandler(slot_clearing(std::move(handler))));
}

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// LockManager and LockGuard: the public API's non-template parts.
#include <redis_lock/lock.hpp>

#include "completion.hpp"
#include "lock_service.hpp"

#include <boost/asio/system_executor.hpp>

namespace redis_lock {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// An empty guard has no executor of its own: complete on the handler's associated executor,
// reached through the system executor, never inline.
void complete_empty(detail::BoolHandler handler) {
  detail::deliver(asio::any_io_executor(asio::system_executor()), detail::Defer::yes,
                  std::move(handler), error_code{}, false);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// LockGuard

LockGuard::LockGuard() noexcept = default;

LockGuard::LockGuard(std::shared_ptr<detail::LockService> service, std::string resource,
                     std::string token, std::uint64_t fencing_token) noexcept
    : service_(std::move(service)),
      resource_(std::move(resource)),
      token_(std::move(token)),
      fencing_token_(fencing_token) {}

LockGuard::LockGuard(LockGuard&& other) noexcept
    : service_(std::move(other.service_)),
      resource_(std::move(other.resource_)),
      token_(std::move(other.token_)),
      fencing_token_(std::exchange(other.fencing_token_, 0)) {
  other.service_.reset();
  other.resource_.clear();
  other.token_.clear();
}

LockGuard& LockGuard::operator=(LockGuard&& other) noexcept {
  if (this != &other) {
    release_detached();
    service_ = std::move(other.service_);
    resource_ = std::move(other.resource_);
    token_ = std::move(other.token_);
    fencing_token_ = std::exchange(other.fencing_token_, 0);
    other.service_.reset();
    other.resource_.clear();
    other.token_.clear();
  }
  return *this;
}

LockGuard::~LockGuard() { release_detached(); }

void LockGuard::release_detached() noexcept {
  if (!service_) return;
  auto service = std::move(service_);
  service_.reset();
  service->release_detached(std::move(resource_), std::move(token_));
  resource_.clear();
  token_.clear();
  fencing_token_ = 0;
}

void LockGuard::release_impl(LockGuard guard, detail::BoolHandler handler) {
  std::shared_ptr<detail::LockService> service;
  std::string resource, token;
  detail::GuardAccess::take(guard, service, resource, token);
  if (!service) return complete_empty(std::move(handler));
  service->release(std::move(resource), std::move(token), std::move(handler));
}

void LockGuard::extend_impl(std::shared_ptr<detail::LockService> service, std::string resource,
                            std::string token, std::chrono::milliseconds ttl,
                            detail::BoolHandler handler) {
  if (!service) return complete_empty(std::move(handler));
  service->extend(std::move(resource), std::move(token), ttl, std::move(handler));
}

// ---------------------------------------------------------------------------------------
// LockManager

LockManager::LockManager(executor_type ex, ConnectionConfig config)
    : LockManager(std::move(ex), std::move(config), ManagerOptions{}) {}

LockManager::LockManager(executor_type ex, ConnectionConfig config, ManagerOptions options)
    : executor_(ex),
      service_(std::make_shared<detail::LockService>(std::move(ex), std::move(config),
                                                      std::move(options))) {
  service_->watch_context_shutdown();
}

LockManager::~LockManager() = default;

std::string LockManager::last_server_error() const {
  return service_ ? service_->last_server_error() : std::string{};
}

void LockManager::acquire_impl(std::shared_ptr<detail::LockService> service, std::string resource,
                               LockOptions options, detail::AcquireHandler handler) {
  if (!service) {  // a moved-from manager
    return detail::deliver(asio::any_io_executor(asio::system_executor()), detail::Defer::yes,
                           std::move(handler), error_code(error::invalid_argument), LockGuard{});
  }
  service->acquire(std::move(resource), options, std::move(handler));
}

}  // namespace redis_lock

// SPDX-License-Identifier: MIT
// LockManager and LockGuard: the public API's non-template parts.
#include <redis_lock/lock.hpp>

#include "completion.hpp"
#include "lock_service.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>

namespace redis_lock {

namespace asio = boost::asio;
using boost::system::error_code;

std::vector<LockGuard> detail::to_public(std::vector<Grant>&& grants) {
  std::vector<LockGuard> guards;
  guards.reserve(grants.size());
  for (auto& g : grants) guards.push_back(to_public(std::move(g)));
  return guards;
}

void detail::post_completion(const asio::any_io_executor& io,
                             asio::any_completion_handler<void()> handler) {
  // The handler's own executor is its associated executor (any_completion_handler keeps
  // it); posting through `io` dispatches there, as Asio's own operations do.
  if (io) return asio::post(io, std::move(handler));
  // A handler whose executor no any_io_executor can hold (complete_without_lock passes
  // every other one as `io`): a system thread hands it to that executor, never inside the
  // initiating call. (Posted as it is, Asio's work_dispatcher would keep that executor's
  // work counted on the system thread until after the handler ran, and then touch its
  // context, which the caller may have destroyed by then: TSan's heap-use-after-free.)
  asio::post(asio::system_executor(),
             [h = std::move(handler)]() mutable { asio::dispatch(std::move(h)); });
}

detail::initiation_base::executor_type detail::initiation_base::get_executor() const noexcept {
  if (io_) return io_;
  return executor_type(asio::system_executor());
}

// ---------------------------------------------------------------------------------------
// LockGuard

LockGuard::LockGuard() noexcept = default;

LockGuard::LockGuard(detail::Grant&& grant) noexcept {
  if (!grant) return;
  // A guard completes on its manager's executor, also once it is empty (read on the strand
  // when the lease was granted). Every Engine is the facade a guard calls back into.
  executor_ = std::move(grant.executor);
  context_alive_ = std::move(grant.alive);
  service_ = std::static_pointer_cast<detail::LockService>(std::move(grant.engine));
  resource_ = std::move(grant.resource);
  token_ = std::move(grant.token);
  fencing_token_ = std::exchange(grant.fence, 0);
  lease_ = std::move(grant.lease);
}

LockGuard::LockGuard(LockGuard&& other) noexcept
    : service_(std::move(other.service_)),
      resource_(std::move(other.resource_)),
      token_(std::move(other.token_)),
      fencing_token_(std::exchange(other.fencing_token_, 0)),
      lease_(std::move(other.lease_)),
      executor_(other.executor_),
      context_alive_(other.context_alive_) {
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
    lease_ = std::move(other.lease_);
    // A guard made by a manager keeps that manager's executor, also when an empty
    // (default-constructed) guard is assigned to it.
    if (other.executor_) {
      executor_ = other.executor_;
      context_alive_ = other.context_alive_;
    }
    other.service_.reset();
    other.resource_.clear();
    other.token_.clear();
  }
  return *this;
}

std::chrono::steady_clock::time_point LockGuard::valid_until() const noexcept {
  return lease_ ? lease_->valid_until() : std::chrono::steady_clock::time_point{};
}

bool LockGuard::lost() const noexcept {
  return lease_ && lease_->known_lost(std::chrono::steady_clock::now());
}

asio::cancellation_slot LockGuard::lost_slot() const noexcept {
  return lease_ ? lease_->signal.slot() : asio::cancellation_slot{};
}

LockGuard::~LockGuard() { release_detached(); }

void LockGuard::release_detached() noexcept {
  if (!service_) return;
  auto service = std::move(service_);
  service_.reset();
  service->release_held(std::move(resource_), std::move(token_), std::exchange(lease_, nullptr),
                        {});
  resource_.clear();
  token_.clear();
  fencing_token_ = 0;
}

void LockGuard::release_impl(LockGuard guard, detail::BoolHandler handler,
                             Diagnostics* diagnostics) {
  // The header completes empty guards itself: `guard` holds a lock here. Taking everything
  // out leaves it empty, so its destructor posts nothing more.
  auto service = std::exchange(guard.service_, nullptr);
  service->release_held(std::move(guard.resource_), std::move(guard.token_),
                        std::exchange(guard.lease_, nullptr), std::move(handler), diagnostics);
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
  context_alive_ = service_->context_alive();
}

LockManager::~LockManager() = default;

std::string LockManager::last_server_error() const {
  return service_ ? service_->last_server_error() : std::string{};
}

void LockManager::cancel() {
  if (service_) service_->cancel_all();
}

}  // namespace redis_lock

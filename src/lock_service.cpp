// SPDX-License-Identifier: MIT
// The facade's entry points: each starts an op (engine.hpp is what the ops share).
#include "lock_service.hpp"

#include "acquire_all.hpp"
#include "acquire_op.hpp"
#include "admin.hpp"
#include "completion.hpp"
#include "lease_ops.hpp"

#include <redis_lock/error.hpp>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

void LockService::acquire(std::string resource, LockOptions options, LockKind kind,
                          AcquireHandler handler) {
  start_acquire(*this, std::move(resource), options, kind, std::move(handler));
}

void LockService::acquire_all(std::vector<std::string> resources, LockOptions options,
                              AcquireAllHandler handler) {
  start_acquire_all(*this, std::move(resources), options, std::move(handler));
}

void LockService::inspect(std::string resource, InspectHandler handler) {
  start_inspect(*this, std::move(resource), std::move(handler));
}

void LockService::force_release(std::string resource, BoolHandler handler) {
  start_force_release(*this, std::move(resource), std::move(handler));
}

void LockService::extend(std::string resource, std::string token, std::shared_ptr<LeaseState> lease,
                         std::chrono::milliseconds ttl, BoolHandler handler) {
  start_extend(*this, std::move(resource), std::move(token), std::move(lease), ttl,
               std::move(handler));
}

void LockService::wait_lost(std::shared_ptr<LeaseState> lease, ErrorHandler handler) {
  if (!alive()) return;
  on_strand([self = shared_from_this(), lease = std::move(lease),
             handler = std::move(handler)]() mutable {
    if (lease->lost.load()) {
      return deliver(self->executor(), Defer::yes, std::move(handler),
                     error_code(error::lock_lost));
    }
    lease->has_waiter.store(true);
    if (lease->released.load()) {
      return deliver(self->executor(), Defer::yes, std::move(handler),
                     error_code(asio::error::operation_aborted));
    }
    if (auto previous = lease->take_lost_waiter()) {
      deliver(self->executor(), Defer::yes, std::move(*previous),
              error_code(asio::error::operation_aborted));
    }
    lease->lost_waiter.emplace(std::move(handler));
  });
}

}  // namespace redis_lock::detail

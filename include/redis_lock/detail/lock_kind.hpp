// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: which lock an acquire takes.
#pragma once

#include <redis_lock/observer.hpp>

#include <cstdint>

namespace redis_lock::detail {

/// A mutex (async_acquire), a permit of a semaphore of `limit` permits
/// (async_acquire_permit), or a read-write lock's shared or exclusive hold: in the one
/// vocabulary of kinds the public API, the engine and the observer share (AcquireKind; an
/// election's leadership is taken by Election::async_campaign).
struct LockKind {
  AcquireKind type = AcquireKind::mutex;
  std::uint32_t limit = 0;  ///< permit: the semaphore's number of permits
};

}  // namespace redis_lock::detail

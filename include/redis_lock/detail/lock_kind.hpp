// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: which lock an acquire takes.
#pragma once

#include <cstdint>

namespace redis_lock::detail {

/// A mutex (async_acquire), a permit of a semaphore of `limit` permits
/// (async_acquire_permit), or a read-write lock's shared or exclusive hold.
struct LockKind {
  enum class Type : std::uint8_t { mutex, permit, shared, exclusive };
  Type type = Type::mutex;
  std::uint32_t limit = 0;  ///< permit: the semaphore's number of permits
};

}  // namespace redis_lock::detail

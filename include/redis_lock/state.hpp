// SPDX-License-Identifier: MIT
// What a resource's state reads as: LockInfo (LockManager::async_inspect) and Leader (an
// election's, Election::async_leader and async_observe). Plain values, usable at every
// layer; <redis_lock/lock.hpp> and <redis_lock/election.hpp> include this.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace redis_lock {

/// What LockManager::async_inspect saw of one resource, in one atomic read.
struct LockInfo {
  /// Somebody holds it (a mutex's lease, or at least one hold of a semaphore or read-write
  /// lock).
  bool held = false;
  /// The holder's ManagerOptions::holder_label ("" when it set none, or for a semaphore's or
  /// read-write lock's holds, which record none).
  std::string holder;
  /// How long until the lease expires unless renewed (the longest of a lease set's holds).
  std::chrono::milliseconds ttl_left{0};
  /// The holder's fencing token (0 when not held, and for a semaphore's or read-write
  /// lock's holds, which record none).
  std::uint64_t fencing_token = 0;
  /// Waiters queued for it, alive (refreshing their place).
  std::size_t waiters = 0;

  /// What a resource is in use as.
  enum class Kind : std::uint8_t {
    none,       ///< nothing is held (waiters may still be queued)
    mutex,      ///< a mutex's lease (async_acquire, and an election's leadership)
    semaphore,  ///< a semaphore's permits (async_acquire_permit)
    read_write  ///< a read-write lock's holds (async_acquire_shared / _exclusive)
  };
  Kind kind = Kind::none;   ///< what the resource is in use as
  std::uint32_t limit = 0;  ///< a semaphore's number of permits
  std::size_t holders = 0;  ///< how many hold it (a mutex: 0 or 1)
  bool exclusive = false;   ///< a read-write lock held exclusively
};

/// Who leads an election.
struct Leader {
  std::string value;   ///< what the leader proclaimed (e.g. its address)
  std::uint64_t term;  ///< strictly increasing per election: the leadership's fencing token
};

}  // namespace redis_lock

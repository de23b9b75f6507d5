// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp>, not API: what the engine hands the public
// layer when it took a lease. The public layer makes a LockGuard of it (the engine never
// builds guards itself: docs/architecture.md's layers).
#pragma once

#include <redis_lock/export.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <atomic>

#include <cstdint>
#include <memory>
#include <string>

namespace redis_lock::detail {

class Engine;
struct LeaseState;

/// A lease the engine took, on its way to the caller. Move-only. One dropped on the way (a
/// handler destroyed without being called, an acquire_all giving back what it collected)
/// releases its lease as a guard's destructor would, and stops its renewal.
class REDIS_LOCK_EXPORT Grant {
 public:
  Grant() noexcept = default;
  /// On the manager's strand: the executor and the context's flag are read there, where
  /// the context's shutdown cannot change them.
  Grant(std::shared_ptr<Engine> engine, std::string resource, std::string token,
        std::uint64_t fence, std::shared_ptr<LeaseState> lease) noexcept;
  Grant(Grant&& other) noexcept = default;  // `other` keeps no engine: nothing to release
  /// Releases what *this held, then takes over `other`'s lease.
  Grant& operator=(Grant&& other) noexcept;
  Grant(const Grant&) = delete;
  Grant& operator=(const Grant&) = delete;
  ~Grant();

  explicit operator bool() const noexcept { return engine != nullptr; }
  /// Posts the release of what it holds (if anything) and becomes empty.
  void release() noexcept;

  std::shared_ptr<Engine> engine;  ///< null: holds nothing
  std::string resource;
  std::string token;
  std::uint64_t fence = 0;
  std::shared_ptr<LeaseState> lease;
  boost::asio::any_io_executor executor;           ///< the manager's: a guard completes on it
  std::shared_ptr<const std::atomic<bool>> alive;  ///< the manager's context still runs
};

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// Key layout: lease keys, per-slot fencing counters and wait queues, with Cluster slots.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace redis_lock::detail {

inline constexpr std::uint16_t slot_count = 16384;

/// CRC16/XMODEM as Redis Cluster uses it.
std::uint16_t crc16(std::string_view data) noexcept;

/// The Cluster hash slot of `key`, honouring the first non-empty `{...}` hash tag.
std::uint16_t key_slot(std::string_view key) noexcept;

/// A short string whose slot is `slot`; from a table computed once (thread-safe).
std::string_view slot_tag(std::uint16_t slot) noexcept;

/// A key of a ResourceKeys: a view into it that reads as a string where one is wanted.
class Key : public std::string_view {
 public:
  explicit Key(std::string_view key) noexcept : std::string_view(key) {}
  operator std::string() const { return std::string(data(), size()); }  // NOLINT: implicit
};

/// The keys of one resource under one prefix, in one allocation (they are built for every
/// acquire and every release). Each accessor gives a view into this object, or, called on a
/// temporary, a string of its own (`make_keys(p, r).fence()` outlives the temporary).
class ResourceKeys {
 public:
  Key lease() const& noexcept { return part(0); }  // <prefix>{<resource>}
  Key fence() const& noexcept { return part(1); }  // <prefix>fence:{<tag>}, same slot as lease
  /// <prefix>q:{<tag>}<resource>: waiters in arrival order (zset)
  Key queue() const& noexcept { return part(2); }
  /// <prefix>qx:{<tag>}<resource>: when each place lapses (zset)
  Key queue_expiry() const& noexcept { return part(3); }
  /// <prefix>h:{<tag>}<resource>: a mutex's holder record (fencing token, label) while the
  /// lease handed to a waiter is not yet claimed, and an election leader's; the lease's own
  /// value holds it otherwise
  Key info() const& noexcept { return part(4); }
  std::string lease() && { return part(0); }
  std::string fence() && { return part(1); }
  std::string queue() && { return part(2); }
  std::string queue_expiry() && { return part(3); }
  std::string info() && { return part(4); }

 private:
  friend ResourceKeys make_keys(std::string_view, std::string_view, bool);
  Key part(std::size_t i) const noexcept {
    const std::size_t from = i == 0 ? 0 : ends_[i - 1];
    return Key(std::string_view(text_).substr(from, ends_[i] - from));
  }

  std::string text_;          // the five keys, one after the other
  std::size_t ends_[5] = {};  // where each ends in text_
};

/// The keys of `resource`; a lease set's (`lease_set`: a semaphore, a read-write lock) wait in
/// queues of their own (sq:, sqx:), so that a mutex's waiters never mix with them.
ResourceKeys make_keys(std::string_view prefix, std::string_view resource, bool lease_set = false);

}  // namespace redis_lock::detail

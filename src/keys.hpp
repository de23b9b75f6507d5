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

/// The keys of one resource under one prefix.
struct ResourceKeys {
  std::string lease;         // <prefix>{<resource>}
  std::string fence;         // <prefix>fence:{<tag>}, same slot as lease
  std::string queue;         // <prefix>q:{<tag>}<resource>   waiters in arrival order (zset)
  std::string queue_expiry;  // <prefix>qx:{<tag>}<resource>  when each place lapses (zset)
  std::string info;          // <prefix>h:{<tag>}<resource>   a mutex's holder: fence, label
};

/// The keys of `resource`; a lease set's (`lease_set`: a semaphore, a read-write lock) wait in
/// queues of their own (sq:, sqx:), so that a mutex's waiters never mix with them.
ResourceKeys make_keys(std::string_view prefix, std::string_view resource, bool lease_set = false);

}  // namespace redis_lock::detail

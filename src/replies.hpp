// SPDX-License-Identifier: MIT
// What our scripts' replies and a command's failure mean, without I/O. Used by the engine's
// ops and by the Redlock fan-out; tests/unit/replies_test.cpp holds their tables.
#pragma once

#include "resp.hpp"

#include <boost/system/error_code.hpp>

#include <cstddef>

namespace redis_lock::detail::replies {

/// An acquire script's (non-error) reply: {1, fencing token} or {0, pttl} (any first
/// element but 1 reads as held).
struct Acquire {
  enum class Kind {
    granted,    ///< the lease is ours; `value` is the fencing token (> 0 when well formed)
    held,       ///< someone else holds it; `value` is its remaining ttl in ms, -2 while it
                ///< is free but another waiter is first in line, or <= 0 unknown
    malformed,  ///< not the reply of our script
  } kind = Kind::malformed;
  long long value = 0;
  long long place = 0;  ///< held and queued: the queue entry's expiry (acquire.lua), else 0
};
Acquire read_acquire(const Reply& reply) noexcept;

/// Whether a reply an acquire got after its command timed out (or after a Redlock vote) may
/// mean it took the lease: an array whose first element is the integer 1, whatever follows.
/// Looser than read_acquire on purpose: what cannot be read fully is given back.
bool may_have_granted(const Reply& reply) noexcept;

/// acquire_group.lua's (non-error) reply for `count` resources: {1, fencing token of each}
/// granted (all well formed, each > 0: the tokens are elements 1..count), {0, i} held;
/// anything else that may have granted (may_have_granted) is malformed, and given back.
enum class Group { granted, held, malformed };
Group read_group(const Reply& reply, std::size_t count) noexcept;

/// A release or extend script's (non-error) reply: 1 it was ours (and is released /
/// extended), 0 it was not; anything else is malformed.
enum class Compare { done, not_ours, malformed };
Compare read_compare(const Reply& reply) noexcept;

/// What a WAIT's (non-error) reply says of `wanted` replicas: no error, not_replicated, or
/// unexpected_reply.
boost::system::error_code replication_outcome(const Reply& reply, int wanted) noexcept;

/// Whether a command that failed with `ec` may have run on the server: its link failed
/// after it was written. (A connect failure fails only commands that never left the queue;
/// a timeout has its late reply instead; an error reply means it never ran.)
bool may_have_run(boost::system::error_code ec) noexcept;

/// Whether `ec` is an outage a waiting acquire waits out (the server may be back within the
/// wait): it cannot be reached, the link failed, or it is a demoted master.
bool is_outage(boost::system::error_code ec) noexcept;

/// {taken, value}: the reply an acquire script gives (the Redlock merge builds one).
Reply acquire_reply(long long taken, long long value);
Reply integer_reply(long long value);

}  // namespace redis_lock::detail::replies

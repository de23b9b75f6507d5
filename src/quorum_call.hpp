// SPDX-License-Identifier: MIT
// Layer 3 (topology): Redlock's fan-out. One script call goes to every master at once; the
// answers are merged into the one reply the single-server code expects, so that acquire,
// release, extend and renewal work unchanged. The decisions are quorum.hpp's (sans-io);
// this does the I/O.
#pragma once

#include "router.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock::detail {

/// Sends `op` (an EVALSHA) to every master of `router` and completes `op->on_reply` with the
/// merged reply: acquire -> {1, fencing token} / {0, pttl} / error; release, extend -> 1 / 0 /
/// error. `op->node_results` gets each master's answer. Decides as soon as the outcome is
/// certain, never later than a command timeout (an acquire: never past its ttl either).
/// `acquire` is set for an acquire script's call. On the router's strand.
void fan_out(std::shared_ptr<Router> router, const Connection::Strand& strand, std::size_t masters,
             std::chrono::milliseconds command_timeout, std::shared_ptr<Routed> op,
             std::optional<QuorumAcquire> acquire);

}  // namespace redis_lock::detail

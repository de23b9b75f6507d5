// SPDX-License-Identifier: MIT
// Layer 3 (topology), without I/O: what a Cluster refusal or a script-cache miss asks of the
// client, and how long a command refused that way is tried again. The router feeds it the
// error text and the clock; tests/unit/redirect_test.cpp drives it with tables of cases.
#pragma once

#include "backoff.hpp"

#include <redis_lock/config.hpp>

#include <chrono>
#include <optional>
#include <string_view>

namespace redis_lock::detail::redirect {

using Clock = std::chrono::steady_clock;

/// What an error reply asks of the client.
struct Action {
  enum class Kind {
    none,          ///< a final error: report it
    moved,         ///< MOVED <slot> <address>: the slot lives at `address` now
    ask,           ///< ASK <slot> <address>: once to `address`, after ASKING
    try_again,     ///< TRYAGAIN: a multi-key command whose keys are split by a migration
    cluster_down,  ///< CLUSTERDOWN: the slot has no master yet (a failover is under way)
    no_script,     ///< NOSCRIPT: the server's script cache lacks the script
  } kind = Kind::none;
  std::string_view address;  ///< moved, ask: "host:port" (the host may be empty)
};

/// Reads an error reply's text. A MOVED or ASK without an address is final (`none`).
Action read(std::string_view error) noexcept;

/// "host:port" (the host may be an IPv6 address: the port follows the last colon; it may be
/// empty, meaning the node that answered). False unless the port is 1..65535.
bool parse_address(std::string_view text, Endpoint& out);

/// MOVED/ASK followed within one try of a command; more is a loop.
inline constexpr int max_redirects = 5;

/// The state of one command's redirections and retries.
struct Tries {
  int redirects = 0;  ///< MOVED/ASK followed in this try
  /// TRYAGAIN/CLUSTERDOWN: 5 ms doubling, at most 100 ms.
  Backoff backoff{std::chrono::milliseconds(5), std::chrono::milliseconds(100)};
  Clock::time_point until{};  ///< TRYAGAIN/CLUSTERDOWN: retried until then (set on the first)
  /// Whether one more MOVED/ASK may be followed (and counts it).
  bool follow() noexcept { return ++redirects <= max_redirects; }
  /// TRYAGAIN/CLUSTERDOWN at `now`: the wait before the command is sent again (5 ms
  /// doubling, at most 100 ms), or nothing when it has been retried for one command timeout
  /// and at least until `patience` (a waiting acquire's deadline, a release's validity).
  /// Each retry is a new try for the redirect limit: a split slot answers ASK from the
  /// source, then TRYAGAIN from the target, every time.
  std::optional<std::chrono::milliseconds> retry(Clock::time_point now,
                                                 std::chrono::milliseconds command_timeout,
                                                 Clock::time_point patience) noexcept;
};

/// What the router does with a command refused with an error reply.
struct Step {
  enum class Kind {
    final,      ///< report the error to the command's owner
    with_body,  ///< NOSCRIPT: once more as EVAL with the script's body
    moved,      ///< record the slot's new node and send it there
    ask,        ///< once to the node named, after ASKING
    later,      ///< send it again after `delay` (CLUSTERDOWN: reload the slot map first)
  } kind = Kind::final;
  std::chrono::milliseconds delay{};
};
/// Decides for a command in state `tries` whose reply asked `action`. Redirections and
/// transient refusals are followed on a Cluster only; the NOSCRIPT resend happens once, and
/// only for a script (`has_body`).
Step decide(const Action& action, bool cluster, bool body_sent, bool has_body, Tries& tries,
            Clock::time_point now, std::chrono::milliseconds command_timeout,
            Clock::time_point patience) noexcept;

}  // namespace redis_lock::detail::redirect

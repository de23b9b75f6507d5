// SPDX-License-Identifier: MIT
// Redlock's decisions, without I/O: what one master's answer means, whether the answers so
// far decide the vote, the fencing token a majority mints, and whether a lease taken that
// way is still worth having. The fan-out (quorum_call.cpp) feeds these with
// replies and the clock; tests/unit/quorum_test.cpp drives them with tables of cases.
#pragma once

#include "resp.hpp"
#include "validity.hpp"

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

namespace redis_lock::detail {

namespace quorum {

/// The majority of n masters.
constexpr std::size_t majority(std::size_t n) noexcept { return n / 2 + 1; }

/// One master's answer to a fanned-out script.
struct Answer {
  enum class Kind { granted, refused, failed } kind = Kind::failed;
  boost::system::error_code error{};  ///< failed: why (an error reply, a malformed reply, I/O)
  long long fence = -1;               ///< acquire granted: that master's fencing counter
  long long pttl = -1;                ///< acquire refused: the holder's remaining lease, if known
};

/// An acquire script's reply ({1, counter} granted, {0, pttl} refused), or the I/O error.
Answer read_acquire(boost::system::error_code ec, const Reply& reply);
/// A release or extend script's reply (1 granted, 0 refused), or the I/O error.
Answer read_compare(boost::system::error_code ec, const Reply& reply);

/// The answers counted so far.
struct Tally {
  std::size_t masters = 0;
  std::size_t granted = 0, refused = 0, failed = 0;
  void count(const Answer& a) noexcept {
    a.kind == Answer::Kind::granted   ? ++granted
    : a.kind == Answer::Kind::refused ? ++refused
                                      : ++failed;
  }
};

enum class Verdict {
  undecided,   ///< a majority is still possible either way: wait for more answers
  majority,    ///< a majority granted
  contention,  ///< no majority, and not because of failures: held elsewhere, or not ours
  no_quorum,   ///< no majority, because too many masters failed to answer to tell
};

/// Decides as soon as the outcome is certain.
Verdict decide(const Tally& t) noexcept;

/// The max-register mint: the token is the largest counter among the masters that granted
/// (`fences[i] < 0`: did not grant); those below it must be raised before it is handed out,
/// unless a majority is at it already.
struct Mint {
  long long token = 0;
  std::size_t at_token = 0;           ///< masters whose counter equals the token
  std::vector<std::size_t> to_raise;  ///< granting masters below the token
  bool durable(std::size_t masters) const noexcept { return at_token >= majority(masters); }
};
Mint mint(const std::vector<long long>& fences);

/// Whether a raise of a counter to `token` left it there (the raise script replies with
/// the counter's value).
bool raised_to(boost::system::error_code ec, const Reply& reply, long long token) noexcept;

/// Whether a lease whose attempt started at `started` still has time left at `now`: the
/// ttl minus the time the vote took minus the drift margin (the guard's valid_until()).
bool still_valid(std::chrono::steady_clock::time_point started, std::chrono::milliseconds ttl,
                 std::chrono::steady_clock::time_point now) noexcept;

}  // namespace quorum
}  // namespace redis_lock::detail

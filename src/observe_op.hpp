// SPDX-License-Identifier: MIT
// Layer 4 (engine): an election's observers (Election::async_leader, async_observe). A
// candidate's scripts announce each change of leader on the election's channel: '<term> <ttl
// ms> <label>\n<value>' when a leader takes the lease or renews it, '- <term>' when it ends
// with nobody after it (shared.lua's record and ended). An observer listens there and reads
// the state (inspect.lua) only when it subscribes and when the leader's lease runs out
// unrenewed. ObserveFsm decides (sans-io, tests/unit/observe_fsm_test.cpp); ObserveOp does
// the subscription, the reads and the timer.
#pragma once

#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/initiations.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace redis_lock::detail {

class Engine;

/// An announcement: a leader ('<term> <ttl ms> <data>') or an end ('- <term>').
struct Announcement {
  bool ended = false;
  std::uint64_t term = 0;
  std::chrono::milliseconds ttl{0};
  std::string_view value;  // after the label's newline
};
/// nullopt: not an announcement of ours (nothing is done with it).
std::optional<Announcement> read_announcement(std::string_view message);

/// The decisions of one async_observe that waits. Events with their time; each returns the
/// action to perform.
class ObserveFsm {
 public:
  using Clock = std::chrono::steady_clock;
  /// A silent leader's lease is read again this long after it should have run out (the
  /// server's expiry and our clock differ by the drift of one command).
  static constexpr std::chrono::milliseconds expiry_slack{5};
  /// After a lost subscription: subscribe again after this.
  static constexpr std::chrono::milliseconds resubscribe_delay{100};

  struct Action {
    enum class Kind {
      none,
      watch,     ///< subscribe to the election's channel (listening() or unheard() follow)
      read,      ///< read the state (inspect.lua), then state_read()
      sleep,     ///< (re)arm the one timer for `until`, then timer_fired(); an earlier wait is void
      complete,  ///< complete with `ec` and, if `leader`, the leader the last read found
    };
    Kind kind = Kind::none;
    bool leader = false;
    boost::system::error_code ec;
    Clock::time_point until;
    friend bool operator==(const Action&, const Action&) = default;
  };

  /// `next_leader_only`: `after_term` was reported ended already (no leader is no news).
  ObserveFsm(std::uint64_t after_term, bool next_leader_only) noexcept
      : after_term_(after_term), next_leader_only_(next_leader_only) {}

  Action start();
  /// Subscribed (also at once when the channel already was): what was announced before may
  /// have been missed, so the state is read.
  Action listening();
  /// The subscription failed or its link went down: subscribe again after a pause.
  Action unheard(Clock::time_point now);
  /// The server refused the SUBSCRIBE (`ec`, e.g. no_permission).
  Action refused(boost::system::error_code ec);
  Action heard(Clock::time_point now, std::string_view message);
  /// The read's answer: `ec`, or the leader's term (nullopt: nobody leads) and its lease's
  /// remaining ttl.
  Action state_read(Clock::time_point now, boost::system::error_code ec,
                    std::optional<std::uint64_t> leader_term, std::chrono::milliseconds ttl_left);
  Action timer_fired();
  Action cancel();

  bool done() const noexcept { return done_; }

 private:
  Action read();
  Action sleep(Clock::time_point until, bool resubscribe);
  Action complete(boost::system::error_code ec, bool leader);

  std::uint64_t after_term_;
  bool next_leader_only_;
  bool done_ = false;
  bool reading_ = false;
  bool read_again_ = false;   // an event asked for a read while one was under way
  bool resubscribe_ = false;  // what the timer is for: subscribing again, else a read
};

}  // namespace redis_lock::detail

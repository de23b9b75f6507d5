// SPDX-License-Identifier: MIT
// A waiting acquire's sleep between attempts, without a server.
#include "acquire_op.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

using namespace redis_lock::detail;
using namespace std::chrono_literals;

TEST(AcquireOp, SleepWhenHeld) {
  struct Case {
    const char* name;
    bool listening;
    long long pttl;
    std::chrono::milliseconds draw;  // the jittered backoff drawn
    std::chrono::milliseconds want;
  };
  const Case cases[] = {
      // Listening for hand-offs: until the lease could expire, at most a queue refresh.
      {"listening, short lease", true, 50, 7ms, 51ms},
      {"listening, long lease: refresh the queue place", true, 30'000, 7ms, refresh_interval},
      {"listening, lease just expiring", true, 1, 7ms, 2ms},
      // Reserved for another waiter's claim (-2), or no ttl known: back off.
      {"listening, reserved for a claim", true, -2, 7ms, 7ms},
      {"listening, unknown ttl", true, -1, 7ms, 7ms},
      // Not listening (yet): back off, never past the lease's end.
      {"not listening", false, 30'000, 7ms, 7ms},
      {"not listening, lease ends first", false, 3, 7ms, 3ms},
      {"not listening, reserved", false, -2, 300ms, 300ms},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(AcquireOp::sleep_when_held(c.listening, c.pttl, c.draw), c.want) << c.name;
  }
}

TEST(AcquireOp, AfterAFailedAttempt) {
  using redis_lock::error;
  struct Case {
    boost::system::error_code ec;
    bool redlock, waiting, cancelled;
    bool give_back, wait_out;
  };
  const Case cases[] = {
      // The link failed after the script was written: give back; an outage waits it out.
      {error::connection_lost, false, true, false, true, true},
      {error::connection_lost, false, false, false, true, false},
      {error::connection_lost, false, true, true, true, false},  // cancelled: complete
      {error::read_only, false, true, false, true, true},        // a failover
      {error::protocol_error, false, true, false, true, false},  // not an outage
      // Never written: nothing to give back; an outage still waits.
      {error::connect_failed, false, true, false, false, true},
      {error::connect_timeout, false, true, false, false, true},
      {error::connect_failed, false, false, false, false, false},
      // A timeout: its late reply decides; no outage.
      {error::timeout, false, true, false, false, false},
      // Redlock: the fan-out gave back; a majority decides, no waiting out.
      {error::connection_lost, true, true, false, false, false},
      {error::no_quorum, true, true, false, false, false},
  };
  for (const auto& c : cases) {
    const auto got = AcquireOp::after_failure(c.ec, c.redlock, c.waiting, c.cancelled);
    EXPECT_EQ(got.give_back, c.give_back) << c.ec.message() << " redlock=" << c.redlock;
    EXPECT_EQ(got.wait_out, c.wait_out) << c.ec.message() << " redlock=" << c.redlock
                                        << " waiting=" << c.waiting << " cancelled=" << c.cancelled;
  }
}

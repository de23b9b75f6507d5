// SPDX-License-Identifier: MIT
// The renewal watchdog's decisions on a fake clock: when a lease is renewed, when it is lost,
// and in which order the schedule gives leases back.
#include "renewal.hpp"

#include <gtest/gtest.h>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Due = RenewalSchedule::Due;
using Answer = RenewalSchedule::Answer;

namespace {

const Clock::time_point t0 = Clock::time_point{} + 1h;

std::shared_ptr<LeaseState> lease(std::chrono::milliseconds ttl, std::chrono::milliseconds every,
                                  Clock::time_point confirmed_at = t0) {
  auto l = std::make_shared<LeaseState>();
  l->ttl = ttl;
  l->renew_every = every;
  l->confirm(confirmed_at, ttl);
  return l;
}

}  // namespace

TEST(RenewalSchedule, IntervalIsAThirdOfTheTtlUnlessSet) {
  struct Case {
    std::chrono::milliseconds ttl, renew_every, want;
  };
  const Case cases[] = {
      {30s, 0ms, 10s},     {600ms, 0ms, 200ms}, {2ms, 0ms, 1ms},  // never 0
      {30s, 100ms, 100ms}, {1s, 5s, 1s},                          // at most the ttl
  };
  for (const auto& c : cases) {
    EXPECT_EQ(RenewalSchedule::interval(c.ttl, c.renew_every), c.want)
        << c.ttl.count() << "/" << c.renew_every.count();
  }
}

TEST(RenewalSchedule, DueTimesFallOnA25msGridRoundedDown) {
  const auto base = Clock::time_point{} + 1000ms;
  // clang-format off (a table: one case per line)
  const std::pair<std::chrono::microseconds, std::chrono::milliseconds> cases[] = {
      {0us, 0ms},       {1us, 0ms},       {24'999us, 0ms},
      {25'000us, 25ms}, {49'999us, 25ms}, {50'000us, 50ms}};
  for (auto [offset, want] : cases) {
    EXPECT_EQ(RenewalSchedule::grid(base + offset), base + want) << offset.count();
    EXPECT_LE(RenewalSchedule::grid(base + offset), base + offset);  // never late
  }
}

TEST(RenewalSchedule, WhatADueLeaseGets) {
  struct Case {
    const char* name;
    std::chrono::milliseconds at;  // since the lease was confirmed (ttl 1000 ms: valid ~988 ms)
    bool released, lost, renewing;
    std::chrono::milliseconds hold;  // max_hold since t0; 0: none
    Due want;
  };
  // clang-format on
  const Case cases[] = {
      {"renew", 300ms, false, false, false, 0ms, Due::renew},
      {"renewal in flight: check", 300ms, false, false, true, 0ms, Due::check},
      {"past max_hold: check, let it run out", 600ms, false, false, false, 500ms, Due::check},
      {"before max_hold: renew", 400ms, false, false, false, 500ms, Due::renew},
      {"at validity: lost", 988ms, false, false, false, 0ms, Due::lost},
      {"past validity: lost", 2000ms, false, false, true, 0ms, Due::lost},
      {"released: skip", 300ms, true, false, false, 0ms, Due::skip},
      {"lost already: skip", 2000ms, false, true, false, 0ms, Due::skip},
  };
  for (const auto& c : cases) {
    auto l = lease(1000ms, 333ms);
    l->released = c.released;
    l->lost = c.lost;
    l->renewing = c.renewing;
    if (c.hold.count()) l->hold_until = t0 + c.hold;
    EXPECT_EQ(RenewalSchedule::due(*l, t0 + c.at), c.want) << c.name;
  }
}

TEST(RenewalSchedule, WhenToLookAgainAfterARenewal) {
  auto l = lease(1000ms, 300ms);  // valid until t0 + 988 ms
  const auto sent = t0 + 300ms;
  // Confirmed: the next renewal one interval after the renewal was sent, on the grid.
  EXPECT_EQ(RenewalSchedule::after(*l, Answer::confirmed, sent, sent + 5ms),
            RenewalSchedule::grid(sent + 300ms));
  // Refused: lost.
  EXPECT_FALSE(RenewalSchedule::after(*l, Answer::refused, sent, sent + 5ms).has_value());
  // Unknown: again after a quarter interval (at least 10 ms), never past the validity.
  EXPECT_EQ(RenewalSchedule::after(*l, Answer::unknown, sent, sent + 5ms), sent + 5ms + 75ms);
  EXPECT_EQ(RenewalSchedule::after(*l, Answer::unknown, sent, t0 + 950ms), t0 + 988ms);
  auto fast = lease(100ms, 20ms);
  EXPECT_EQ(RenewalSchedule::after(*fast, Answer::unknown, t0, t0 + 1ms), t0 + 11ms);
}

TEST(RenewalSchedule, GivesLeasesBackInDueOrderOnce) {
  RenewalSchedule s;
  auto a = lease(1s, 300ms), b = lease(1s, 300ms), c = lease(1s, 300ms);
  EXPECT_TRUE(s.put(a, t0 + 300ms));  // the earliest
  EXPECT_FALSE(s.put(b, t0 + 400ms));
  EXPECT_TRUE(s.put(c, t0 + 100ms));  // earlier still: the timer must move
  EXPECT_EQ(s.next(), t0 + 100ms);
  EXPECT_FALSE(s.put(c, t0 + 500ms));  // replaces c's entry
  EXPECT_EQ(s.next(), t0 + 300ms);
  EXPECT_EQ(s.take(t0 + 299ms), nullptr);  // nothing due yet
  EXPECT_EQ(s.take(t0 + 450ms), a);
  EXPECT_FALSE(a->scheduled);
  EXPECT_EQ(s.take(t0 + 450ms), b);
  EXPECT_EQ(s.take(t0 + 450ms), nullptr);
  EXPECT_FALSE(s.remove(*a));  // not scheduled: nothing to remove
  EXPECT_TRUE(s.remove(*c));   // the last one: empty now
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.next().has_value());
}

// SPDX-License-Identifier: MIT
// Cluster redirections and script-cache misses without a server: what an error reply asks,
// where an address points, and how long a refused command is tried again.
#include "redirect.hpp"

#include <gtest/gtest.h>

using namespace redis_lock;
using namespace redis_lock::detail;
using namespace redis_lock::detail::redirect;
using namespace std::chrono_literals;
using Kind = Action::Kind;

TEST(Redirect, ReadsWhatAnErrorReplyAsks) {
  struct Case {
    const char* text;
    Kind kind;
    const char* address;
  };
  const Case cases[] = {
      {"MOVED 3999 127.0.0.1:6381", Kind::moved, "127.0.0.1:6381"},
      {"ASK 3999 127.0.0.1:6381", Kind::ask, "127.0.0.1:6381"},
      {"MOVED 3999 :6381", Kind::moved, ":6381"},  // empty host: the node that answered
      {"MOVED 3999 [::1]:6381", Kind::moved, "[::1]:6381"},
      {"MOVED 3999", Kind::none, ""},  // no address: final
      {"MOVED", Kind::none, ""},
      {"ASK 3999", Kind::none, ""},
      {"MOVEDX 1 a:1", Kind::none, ""},
      {"TRYAGAIN Multiple keys request during rehashing of slot", Kind::try_again, ""},
      {"CLUSTERDOWN The cluster is down", Kind::cluster_down, ""},
      {"CLUSTERDOWN Hash slot not served", Kind::cluster_down, ""},
      {"NOSCRIPT No matching script. Please use EVAL.", Kind::no_script, ""},
      {"ERR unknown command", Kind::none, ""},
      {"READONLY You can't write against a read only replica.", Kind::none, ""},
      {"moved 1 a:1", Kind::none, ""},  // case matters: Redis sends upper case
      {"", Kind::none, ""},
  };
  for (const auto& c : cases) {
    const auto action = read(c.text);
    EXPECT_EQ(action.kind, c.kind) << c.text;
    EXPECT_EQ(action.address, c.address) << c.text;
  }
}

TEST(Redirect, ParsesAddresses) {
  struct Case {
    const char* text;
    bool ok;
    const char* host;
    std::uint16_t port;
  };
  const Case cases[] = {
      {"127.0.0.1:6379", true, "127.0.0.1", 6379},
      {"redis-1.internal:7000", true, "redis-1.internal", 7000},
      {":7000", true, "", 7000},
      {"::1:7000", true, "::1", 7000},  // IPv6: the port follows the last colon
      {"host:65535", true, "host", 65535},
      {"host:65536", false, "", 0},
      {"host:0", false, "", 0},
      {"host:", false, "", 0},
      {"host", false, "", 0},
      {"host:12a", false, "", 0},
      {"host:-1", false, "", 0},
      {"", false, "", 0},
  };
  for (const auto& c : cases) {
    Endpoint e;
    EXPECT_EQ(parse_address(c.text, e), c.ok) << c.text;
    if (!c.ok) continue;
    EXPECT_EQ(e.host, c.host) << c.text;
    EXPECT_EQ(e.port, c.port) << c.text;
  }
}

TEST(Redirect, FollowsAtMostFiveRedirectionsPerTry) {
  Tries tries;
  for (int i = 1; i <= max_redirects; ++i) EXPECT_TRUE(tries.follow()) << i;
  EXPECT_FALSE(tries.follow());  // a loop
  EXPECT_FALSE(tries.follow());
}

TEST(Redirect, RetriesARefusalForACommandTimeoutBackingOff) {
  const auto t0 = Clock::time_point{} + 1h;
  Tries tries;
  // 5, 10, 20, 40, 80 ms, then 100 ms (the cap), as long as time is left.
  const std::chrono::milliseconds expected[] = {5ms, 10ms, 20ms, 40ms, 80ms, 100ms, 100ms, 100ms};
  auto now = t0;
  for (auto delay : expected) {
    const auto got = tries.retry(now, 1000ms, {});
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, delay);
    now += *got;
  }
  EXPECT_EQ(tries.until, t0 + 1000ms);  // set on the first refusal, never moved
  EXPECT_FALSE(tries.retry(t0 + 1000ms, 1000ms, {}).has_value());
  EXPECT_FALSE(tries.retry(t0 + 5000ms, 1000ms, {}).has_value());
}

TEST(Redirect, RetriesUntilThePatienceWhenItIsLater) {
  const auto t0 = Clock::time_point{} + 1h;
  struct Case {
    std::chrono::milliseconds patience_after;  // 0: no patience
    std::chrono::milliseconds gives_up_at;
  };
  const Case cases[] = {{0ms, 1000ms}, {500ms, 1000ms}, {3000ms, 3000ms}};
  for (const auto& c : cases) {
    Tries tries;
    const auto patience = c.patience_after.count() ? t0 + c.patience_after : Clock::time_point{};
    ASSERT_TRUE(tries.retry(t0, 1000ms, patience).has_value());
    EXPECT_TRUE(tries.retry(t0 + c.gives_up_at - 1ms, 1000ms, patience).has_value())
        << c.gives_up_at.count();
    EXPECT_FALSE(tries.retry(t0 + c.gives_up_at, 1000ms, patience).has_value())
        << c.gives_up_at.count();
  }
}

TEST(Redirect, EachRetryIsANewTryForTheRedirectLimit) {
  // A split slot answers ASK from the source, then TRYAGAIN from the target, every time.
  const auto t0 = Clock::time_point{} + 1h;
  Tries tries;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < max_redirects; ++i) ASSERT_TRUE(tries.follow()) << round;
    ASSERT_TRUE(tries.retry(t0, 1000ms, {}).has_value()) << round;
  }
}

TEST(Redirect, DecidesWhatTheRouterDoes) {
  using S = Step::Kind;
  const auto t0 = Clock::time_point{} + 1h;
  struct Case {
    const char* name;
    Action action;
    bool cluster, body_sent, has_body;
    S want;
  };
  // clang-format off (a table: one case per line)
  const Case cases[] = {
      {"final error", {Kind::none, {}}, true, false, true, S::final},
      {"NOSCRIPT: with the body", {Kind::no_script, {}}, false, false, true, S::with_body},
      {"NOSCRIPT on a Cluster too", {Kind::no_script, {}}, true, false, true, S::with_body},
      {"NOSCRIPT again: final", {Kind::no_script, {}}, false, true, true, S::final},
      {"NOSCRIPT to a command without a body",
       {Kind::no_script, {}},
       false,
       false,
       false,
       S::final},
      {"MOVED on a Cluster", {Kind::moved, "a:1"}, true, false, true, S::moved},
      {"ASK on a Cluster", {Kind::ask, "a:1"}, true, false, true, S::ask},
      {"MOVED elsewhere: final", {Kind::moved, "a:1"}, false, false, true, S::final},
      {"ASK elsewhere: final", {Kind::ask, "a:1"}, false, false, true, S::final},
      {"TRYAGAIN on a Cluster", {Kind::try_again, {}}, true, false, true, S::later},
      {"CLUSTERDOWN on a Cluster", {Kind::cluster_down, {}}, true, true, true, S::later},
      {"TRYAGAIN elsewhere: final", {Kind::try_again, {}}, false, false, true, S::final},
      {"CLUSTERDOWN elsewhere: final", {Kind::cluster_down, {}}, false, false, true, S::final},
  };
  // clang-format on
  for (const auto& c : cases) {
    Tries tries;
    const auto step = decide(c.action, c.cluster, c.body_sent, c.has_body, tries, t0, 1s, {});
    EXPECT_EQ(step.kind, c.want) << c.name;
    if (c.want == S::later) {
      EXPECT_EQ(step.delay, 5ms) << c.name;
    }
  }
  // Out of redirections, out of time: final.
  Tries looping;
  for (int i = 0; i < max_redirects; ++i) {
    ASSERT_EQ(decide({Kind::moved, "a:1"}, true, false, true, looping, t0, 1s, {}).kind, S::moved);
  }
  EXPECT_EQ(decide({Kind::ask, "a:1"}, true, false, true, looping, t0, 1s, {}).kind, S::final);
  Tries late;
  EXPECT_EQ(decide({Kind::try_again, {}}, true, false, true, late, t0, 1s, {}).kind, S::later);
  EXPECT_EQ(decide({Kind::try_again, {}}, true, false, true, late, t0 + 1s, 1s, {}).kind, S::final);
}

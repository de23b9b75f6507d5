// SPDX-License-Identifier: MIT
// A Cluster's slot map without a server: what a CLUSTER SLOTS reply says, which node serves
// a slot, and when the map is loaded again (one load at a time, nodes asked in turn, at most
// one load per interval, a late map applied unless a later one is in), on a fake clock.
#include "slot_map.hpp"
#include "reply_builders.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using redis_lock::test::integer;
using redis_lock::test::text;
using Clock = std::chrono::steady_clock;
using Kind = SlotMap::Action::Kind;

namespace {

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(long long ms) { return t0 + std::chrono::milliseconds(ms); }

Reply array(std::vector<Reply> elements) {
  Reply r;
  r.type = Reply::Type::array;
  r.elements = std::move(elements);
  return r;
}

Reply range(long long first, long long last, std::string host, long long port) {
  return array({integer(first), integer(last), array({text(std::move(host)), integer(port)})});
}

const std::vector<SlotMap::Owned> all_on_1 = {{0, 16383, 1}};

}  // namespace

TEST(SlotMap, ReadsTheRangesAndTheirMasters) {
  const auto ranges =
      SlotMap::read(array({range(0, 5460, "10.0.0.1", 7000), range(5461, 10922, "", 7001),
                           range(10923, 16383, "?", 7002)}));
  ASSERT_TRUE(ranges);
  ASSERT_EQ(ranges->size(), 2u) << "a master shown as ? is left out: its slots stay unknown";
  EXPECT_EQ((*ranges)[0].first, 0);
  EXPECT_EQ((*ranges)[0].last, 5460);
  EXPECT_EQ((*ranges)[0].master.host, "10.0.0.1");
  EXPECT_EQ((*ranges)[0].master.port, 7000);
  EXPECT_EQ((*ranges)[1].master.host, "") << "an empty host: the node that answered";
  EXPECT_EQ((*ranges)[1].master.port, 7001);
}

TEST(SlotMap, RefusesWhatIsNoMap) {
  const Reply not_maps[] = {
      text("OK"),
      array({}),
      array({array({integer(0), integer(5)})}),                                 // no master
      array({array({integer(0), text("5"), array({text("h"), integer(1)})})}),  // a text end
      array({range(-1, 5, "h", 7000)}),
      array({range(0, 16384, "h", 7000)}),  // past the last slot
      array({range(6, 5, "h", 7000)}),      // backwards
      array({range(0, 5, "h", 0)}),
      array({range(0, 5, "h", 65536)}),
      array({range(0, 5, "h", 7000), text("x")}),
  };
  int i = 0;
  for (const auto& reply : not_maps) EXPECT_FALSE(SlotMap::read(reply)) << i++;
}

TEST(SlotMap, TheFirstLoadAsksTheFirstNodeAndEndsWithTheMapReleasingWhatWaited) {
  SlotMap map(100ms);
  EXPECT_TRUE(map.before_first_map());
  EXPECT_EQ(map.owner(42), SlotMap::unknown);
  EXPECT_EQ(map.fallback(), 0u) << "the seed, before any map";
  const auto ask = map.refresh(at(0), 3);
  EXPECT_EQ(ask.kind, Kind::query);
  EXPECT_EQ(ask.node, 0u);
  EXPECT_FALSE(ask.release);
  EXPECT_TRUE(map.loading());
  // Asked again meanwhile: one load at a time; another after it.
  EXPECT_EQ(map.refresh(at(1), 3).kind, Kind::none);
  const auto done = map.applied(ask.query, 2, {{0, 99, 1}, {100, 16383, 2}}, at(5), 3);
  EXPECT_TRUE(done.release);
  EXPECT_FALSE(map.before_first_map());
  EXPECT_EQ(map.owner(42), 1);
  EXPECT_EQ(map.owner(100), 2);
  EXPECT_EQ(map.fallback(), 2u) << "the node that answered";
  // The load wanted meanwhile waits out the interval since the first began.
  EXPECT_EQ(done.kind, Kind::wait);
  EXPECT_EQ(done.until, at(100));
  EXPECT_FALSE(map.loading());
  const auto again = map.timer_over(at(100), 3);
  EXPECT_EQ(again.kind, Kind::query);
  EXPECT_EQ(again.node, 1u) << "the next node in turn";
  EXPECT_GT(again.query, ask.query);
}

TEST(SlotMap, ANodeThatFailsToAnswerPassesTheQueryToTheNextUntilAllWereAsked) {
  SlotMap map(100ms);
  auto act = map.refresh(at(0), 3);
  std::vector<std::size_t> asked{act.node};
  for (;;) {
    act = map.failed(act.query, at(1), 3);
    if (act.kind != Kind::query) break;
    asked.push_back(act.node);
  }
  EXPECT_EQ(asked, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_TRUE(act.release) << "nobody answered: what waited goes to the seed";
  EXPECT_FALSE(map.before_first_map()) << "the first load ended, without a map";
  EXPECT_EQ(map.owner(0), SlotMap::unknown);
  // The next load starts after the node asked last, so a dead first node is not asked first.
  act = map.refresh(at(200), 3);
  EXPECT_EQ(act.node, 0u);
  act = map.failed(act.query, at(201), 3);
  EXPECT_EQ(act.node, 1u);
  act = map.applied(act.query, 1, all_on_1, at(202), 3);
  EXPECT_EQ(act.kind, Kind::none);
  act = map.refresh(at(400), 3);
  EXPECT_EQ(act.node, 2u);
}

TEST(SlotMap, AtMostOneLoadPerIntervalAndOneTimerForABurst) {
  SlotMap map(100ms);
  auto act = map.refresh(at(0), 1);
  act = map.applied(act.query, 0, all_on_1, at(3), 1);
  EXPECT_EQ(act.kind, Kind::none) << "nothing was wanted meanwhile";
  const auto wait = map.refresh(at(10), 1);
  EXPECT_EQ(wait.kind, Kind::wait);
  EXPECT_EQ(wait.until, at(100));
  for (int t = 11; t < 20; ++t) {
    EXPECT_EQ(map.refresh(at(t), 1).kind, Kind::none) << "a burst of MOVED: one timer";
  }
  EXPECT_EQ(map.timer_over(at(100), 1).kind, Kind::query);
}

TEST(SlotMap, ALateMapIsAppliedUnlessALaterOnesIsIn) {
  SlotMap map(100ms);
  const auto first = map.refresh(at(0), 2);
  // It timed out; the next node is asked, and answers.
  const auto second = map.failed(first.query, at(1000), 2);
  ASSERT_EQ(second.kind, Kind::query);
  EXPECT_TRUE(map.fresh(first.query));
  EXPECT_EQ(map.applied(second.query, 1, {{0, 16383, 1}}, at(1001), 2).release, true);
  EXPECT_EQ(map.owner(7), 1);
  // The first query's map arrives late: a later one is in, it is not applied.
  EXPECT_FALSE(map.fresh(first.query));
  const auto late = map.applied(first.query, 0, {{0, 16383, 0}}, at(1002), 2);
  EXPECT_EQ(late.kind, Kind::none);
  EXPECT_FALSE(late.release);
  EXPECT_EQ(map.owner(7), 1);
  EXPECT_EQ(map.fallback(), 1u);
}

TEST(SlotMap, ALateMapFromBeforeAnyOtherIsAppliedWithoutEndingTheLoadUnderWay) {
  SlotMap map(100ms);
  const auto first = map.refresh(at(0), 2);
  const auto second = map.failed(first.query, at(1000), 2);
  const auto late = map.applied(first.query, 0, {{0, 16383, 0}}, at(1001), 2);
  EXPECT_EQ(late.kind, Kind::none);
  EXPECT_FALSE(late.release) << "the load under way is the second query's";
  EXPECT_TRUE(map.loading());
  EXPECT_EQ(map.owner(7), 0) << "but the map is better than none";
  // The second query's own failure moves on; its answer ends the load.
  EXPECT_EQ(map.failed(first.query, at(1002), 2).kind, Kind::none) << "a stale failure";
  EXPECT_TRUE(map.applied(second.query, 1, all_on_1, at(1003), 2).release);
}

TEST(SlotMap, AMovedSlotHasItsNewOwnerAtOnce) {
  SlotMap map(100ms);
  auto act = map.refresh(at(0), 2);
  map.applied(act.query, 0, {{0, 16383, 0}}, at(1), 2);
  map.moved(42, 1);
  EXPECT_EQ(map.owner(42), 1);
  EXPECT_EQ(map.owner(43), 0);
}

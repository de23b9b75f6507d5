// SPDX-License-Identifier: MIT
// An election observer's decisions without a server: ObserveFsm through scripted events
// with a fake clock. The interleavings live tests can only reach by timing: an announcement
// that arrives while a read is under way, a subscription confirmed after the observer ended,
// a forged announcement, a renewal that re-arms the expiry read, a lost subscription.
#include "observe_op.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using redis_lock::error;
using Kind = ObserveFsm::Action::Kind;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;
using std::chrono::milliseconds;

namespace {

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(long long ms) { return t0 + milliseconds(ms); }

enum class Ev {
  start,
  listening,
  unheard,
  refused,
  heard,
  read_leader,
  read_nobody,
  read_failed,
  timer,
  cancel
};

struct Event {
  Event(Ev e, long long at_ms = 0, std::string text = {}, std::uint64_t leader_term = 0,
        long long left_ms = 0, error_code code = {})
      : ev(e), t(at_ms), message(std::move(text)), term(leader_term), ttl_left(left_ms), ec(code) {}
  Ev ev;
  long long t;
  std::string message;
  std::uint64_t term;
  long long ttl_left;
  error_code ec;
};

Event start() { return {Ev::start}; }
Event listening() { return {Ev::listening}; }
Event unheard(long long t) { return {Ev::unheard, t}; }
Event refused(error_code ec) { return {Ev::refused, 0, {}, 0, 0, ec}; }
Event heard(long long t, std::string m) { return {Ev::heard, t, std::move(m)}; }
Event read_leader(long long t, std::uint64_t term, long long ttl_left) {
  return {Ev::read_leader, t, {}, term, ttl_left};
}
Event read_nobody(long long t) { return {Ev::read_nobody, t}; }
Event read_failed(error_code ec) { return {Ev::read_failed, 0, {}, 0, 0, ec}; }
Event timer() { return {Ev::timer}; }
Event cancel() { return {Ev::cancel}; }

ObserveFsm::Action act(Kind k, bool leader = false, error_code ec = {}, long long until = -1) {
  ObserveFsm::Action a;
  a.kind = k;
  a.leader = leader;
  a.ec = ec;
  if (until >= 0) a.until = at(until);
  return a;
}
ObserveFsm::Action none() { return act(Kind::none); }
ObserveFsm::Action watch() { return act(Kind::watch); }
ObserveFsm::Action read() { return act(Kind::read); }
ObserveFsm::Action sleep(long long until) { return act(Kind::sleep, false, {}, until); }
ObserveFsm::Action leader() { return act(Kind::complete, true); }
ObserveFsm::Action nobody() { return act(Kind::complete, false); }
ObserveFsm::Action failed(error_code ec) { return act(Kind::complete, false, ec); }

ObserveFsm::Action feed(ObserveFsm& fsm, const Event& e) {
  switch (e.ev) {
    case Ev::start:
      return fsm.start();
    case Ev::listening:
      return fsm.listening();
    case Ev::unheard:
      return fsm.unheard(at(e.t));
    case Ev::refused:
      return fsm.refused(e.ec);
    case Ev::heard:
      return fsm.heard(at(e.t), e.message);
    case Ev::read_leader:
      return fsm.state_read(at(e.t), {}, e.term, milliseconds(e.ttl_left));
    case Ev::read_nobody:
      return fsm.state_read(at(e.t), {}, std::nullopt, 0ms);
    case Ev::read_failed:
      return fsm.state_read(at(e.t), e.ec, std::nullopt, 0ms);
    case Ev::timer:
      return fsm.timer_fired();
    case Ev::cancel:
      return fsm.cancel();
  }
  return {};
}

struct Row {
  const char* name;
  std::uint64_t after_term;
  bool next_leader_only;
  std::vector<std::pair<Event, ObserveFsm::Action>> steps;
  bool done;
};

std::ostream& operator<<(std::ostream& os, const Row& r) { return os << r.name; }

const error_code aborted = boost::asio::error::operation_aborted;

const Row rows[] = {
    {"TermZeroLearnsTheLeaderAtOnce",
     0,
     false,
     {{start(), watch()}, {listening(), read()}, {read_leader(1, 3, 5000), leader()}},
     true},
    {"TermZeroLearnsThatNobodyLeads",
     0,
     false,
     {{start(), watch()}, {listening(), read()}, {read_nobody(1), nobody()}},
     true},
    {"AfterAnEndedTermNobodyIsNoNews",
     1,
     true,
     {{start(), watch()},
      {listening(), read()},
      {read_nobody(1), none()},
      {heard(50, "2 5000 web-1\nv"), read()},
      {read_leader(51, 2, 5000), leader()}},
     true},
    {"TheCurrentLeaderIsWatchedUntilItsLeaseCouldEnd",
     3,
     false,
     {{start(), watch()}, {listening(), read()}, {read_leader(1, 3, 4000), sleep(4006)}},
     false},
    {"ARenewalReArmsTheExpiryRead",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 4000), sleep(4006)},
      {heard(1000, "3 5000 web-1\nv"), sleep(6005)}},
     false},
    {"ASilentLeadersLeaseEndIsReadAndNobodyFollows",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 100), sleep(106)},
      {timer(), read()},
      {read_nobody(106), nobody()}},
     true},
    {"AnAnnouncedNewTermIsCheckedNotTrusted",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 4000), sleep(4006)},
      {heard(10, "999 5000 forged\nx"), read()},
      {read_leader(11, 3, 3990), sleep(4006)}},
     false},
    {"AnAnnouncedEndIsChecked",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 4000), sleep(4006)},
      {heard(10, "- 3"), read()},
      {read_leader(11, 4, 5000), leader()}},
     true},
    {"AnOlderTermsEndIsIgnored",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 4000), sleep(4006)},
      {heard(10, "- 2"), none()},
      {heard(11, "2 5000 a\nb"), none()}},
     false},
    {"GarbageOnTheChannelIsIgnored",
     3,
     false,
     {{start(), watch()},
      {heard(1, "hello"), none()},
      {heard(1, "0 5000 x"), none()},
      {heard(1, "4 -5 x"), none()},
      {heard(1, "- x"), none()}},
     false},
    {"AnAnnouncementDuringAReadReadsOnceMore",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {heard(5, "4 5000 b\nv"), none()},
      {read_leader(6, 3, 4000), read()},
      {read_leader(8, 4, 5000), leader()}},
     true},
    {"ALostSubscriptionSubscribesAgainAfterAPause",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 4000), sleep(4006)},
      {unheard(100), sleep(200)},
      {timer(), watch()},
      {listening(), read()}},
     false},
    {"ARenewalAfterALostSubscriptionWinsTheTimer",
     3,
     false,
     {{start(), watch()},
      {unheard(100), sleep(200)},
      {heard(150, "3 1000 a\nv"), sleep(1155)},
      {timer(), read()}},
     false},
    {"ARefusedSubscribeEnds",
     0,
     false,
     {{start(), watch()}, {refused(error::no_permission), failed(error::no_permission)}},
     true},
    {"AFailedReadEnds",
     0,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_failed(error::connection_lost), failed(error::connection_lost)}},
     true},
    {"CancelledWhileWatching",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {read_leader(1, 3, 4000), sleep(4006)},
      {cancel(), failed(aborted)},
      {timer(), none()}},
     true},
    {"CancelledDuringAReadIgnoresItsAnswer",
     3,
     false,
     {{start(), watch()},
      {listening(), read()},
      {cancel(), failed(aborted)},
      {read_leader(2, 4, 5000), none()}},
     true},
    {"ASubscribeConfirmedAfterTheEndChangesNothing",
     0,
     false,
     {{start(), watch()},
      {cancel(), failed(aborted)},
      {listening(), none()},
      {heard(1, "5 100 a\nb"), none()},
      {unheard(2), none()},
      {refused(error::no_permission), none()}},
     true},
    {"CancelledTwiceCompletesOnce",
     0,
     false,
     {{start(), watch()}, {cancel(), failed(aborted)}, {cancel(), none()}},
     true},
    {"StartedAfterCancelDoesNotWatch",
     0,
     false,
     {{cancel(), failed(aborted)}, {start(), none()}},
     true},
};

class ObserveFsmRows : public ::testing::TestWithParam<Row> {};

TEST_P(ObserveFsmRows, EachStepReturnsItsAction) {
  const Row& row = GetParam();
  ObserveFsm fsm(row.after_term, row.next_leader_only);
  int step = 0;
  for (const auto& [event, want] : row.steps) {
    ++step;
    const auto got = feed(fsm, event);
    EXPECT_TRUE(got == want) << "step " << step << ": got kind " << static_cast<int>(got.kind)
                             << " leader " << got.leader << " ec " << got.ec.message()
                             << ", want kind " << static_cast<int>(want.kind);
  }
  EXPECT_EQ(fsm.done(), row.done);
}

INSTANTIATE_TEST_SUITE_P(ObserveFsm, ObserveFsmRows, ::testing::ValuesIn(rows),
                         [](const auto& row_info) { return std::string(row_info.param.name); });

}  // namespace

TEST(ObserveFsm, ReadAnnouncement) {
  const auto leader = read_announcement("12 3000 web-1\nhttp://10.0.0.1");
  ASSERT_TRUE(leader);
  EXPECT_FALSE(leader->ended);
  EXPECT_EQ(leader->term, 12u);
  EXPECT_EQ(leader->ttl, 3000ms);
  EXPECT_EQ(leader->value, "http://10.0.0.1");
  const auto no_value = read_announcement("12 3000 web-1");
  ASSERT_TRUE(no_value);
  EXPECT_EQ(no_value->value, "");
  const auto ended = read_announcement("- 12");
  ASSERT_TRUE(ended);
  EXPECT_TRUE(ended->ended);
  EXPECT_EQ(ended->term, 12u);
  for (const char* bad : {"", "-", "- ", "x 1 a", "12", "12 ", "12 3000", "0 3000 a", "12 0 a",
                          "12 -1 a", "12 x a"}) {
    EXPECT_FALSE(read_announcement(bad)) << '"' << bad << '"';
  }
}

// SPDX-License-Identifier: MIT
// One acquire's decisions without a server: AcquireFsm driven through scripted sequences of
// events with a fake clock, each step with the action it must return. The interleavings
// that live tests could only reach by timing real servers are rows here: a hand-off
// crossing an attempt, a cancel during replication, an outage running past the deadline,
// and every client-side path of docs/safety.md's hand-off.
#include "acquire_fsm.hpp"
#include "lease_ops.hpp"
#include "waiters.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <string>
#include <vector>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using redis_lock::error;
using Kind = AcquireFsm::Action::Kind;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;
using std::chrono::milliseconds;

namespace {

const error_code aborted = boost::asio::error::operation_aborted;
const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(long long ms) { return t0 + milliseconds(ms); }

// (no_jitter, the cap itself: the backoff's sleeps are 2, 4, 8, ... ms, known in advance.)

// ---- the plans ----------------------------------------------------------------------------

AcquirePlan plan(milliseconds ttl, milliseconds wait, Clock::time_point deadline, bool queues,
                 bool redlock = false) {
  AcquirePlan p;
  p.ttl = ttl;
  p.wait = wait;
  p.deadline = deadline;
  p.queues = queues;
  p.attempt = redlock ? Attempt::vote : Attempt::one_server;
  return p;
}
AcquirePlan one_try() { return plan(5000ms, 0ms, at(0), false); }
AcquirePlan waiting(long long wait_ms = 1000) {
  return plan(5000ms, milliseconds(wait_ms), at(wait_ms), true);
}
AcquirePlan forever() { return plan(5000ms, milliseconds::max(), Clock::time_point::max(), true); }
AcquirePlan durable(long long wait_ms = 0) {
  auto p = wait_ms > 0 ? waiting(wait_ms) : one_try();
  p.min_replicas = 1;
  return p;
}
AcquirePlan redlock(long long wait_ms = 1000) {
  return plan(5000ms, milliseconds(wait_ms), at(wait_ms), false, true);
}

// ---- the events ---------------------------------------------------------------------------

enum class Ev {
  start,
  granted,
  held,
  malformed,
  refused,
  failed,
  listened,
  timer,
  nudge,
  handed,
  cancel,
  replicated,
  mint_failed,
  resend_late
};

struct Event {
  Event(Ev e, long long at_ms, long long v = 0, error_code code = {}, bool listens = false,
        long long where = 0)
      : ev(e), t(at_ms), value(v), ec(code), listening(listens), place(where) {}
  Ev ev;
  long long t = 0;      // ms after t0
  long long value = 0;  // granted, handed: the fence; held: the pttl
  error_code ec{};
  bool listening = false;
  long long place = 0;  // held, handed: the queue place
};

Event start(long long t = 0) { return {Ev::start, t}; }
Event granted(long long t, long long fence = 7) { return {Ev::granted, t, fence}; }
Event held(long long t, long long pttl, long long place = 0) {
  return {Ev::held, t, pttl, {}, false, place};
}
// A signed hand-off message (its signature already checked): fencing token, place.
Event handed(long long t, long long fence, long long place) {
  return {Ev::handed, t, fence, {}, false, place};
}
Event malformed(long long t) { return {Ev::malformed, t}; }
Event refused(long long t, error_code ec) { return {Ev::refused, t, 0, ec}; }
Event failed(long long t, error_code ec) { return {Ev::failed, t, 0, ec}; }
Event listened(long long t, bool listening = true) { return {Ev::listened, t, 0, {}, listening}; }
Event timer(long long t) { return {Ev::timer, t}; }
Event nudge(long long t = 0) { return {Ev::nudge, t}; }
Event cancel(long long t = 0) { return {Ev::cancel, t}; }
Event replicated(long long t, error_code ec = {}) { return {Ev::replicated, t, 0, ec}; }
Event mint_failed(long long t = 0) { return {Ev::mint_failed, t}; }
Event resend_late(long long t) { return {Ev::resend_late, t}; }

// ---- the actions expected -----------------------------------------------------------------

struct Want {
  Want(Kind k = Kind::none, bool back = false, bool minted = false, bool granted = false,
       error_code code = {}, long long until_ms = -1)
      : kind(k), give_back(back), new_token(minted), grant(granted), ec(code), until(until_ms) {}
  Kind kind = Kind::none;
  bool give_back = false;
  bool new_token = false;
  bool grant = false;
  error_code ec{};
  long long until = -1;  // sleep: ms after t0 (-2: time_point::max())
};

Want none() { return {}; }
Want send(bool new_token = false) { return {Kind::send, false, new_token}; }
Want listen() { return {Kind::listen}; }
Want sleep(long long until) { return {Kind::sleep, false, false, false, {}, until}; }
Want wake() { return {Kind::wake}; }
Want replicate() { return {Kind::replicate}; }
Want complete(error_code ec = {}) { return {Kind::complete, false, false, false, ec}; }
Want grant() { return {Kind::complete, false, false, true}; }
Want giving_back(Want w) {
  w.give_back = true;
  return w;
}
Want with_new_token(Want w) {
  w.new_token = true;
  return w;
}

AcquireFsm::Action feed(AcquireFsm& fsm, const Event& e) {
  const auto now = at(e.t);
  switch (e.ev) {
    case Ev::start:
      return fsm.start(now);
    case Ev::granted:
      return fsm.granted(now, e.value);
    case Ev::held:
      return fsm.held(now, e.value, e.place);
    case Ev::malformed:
      return fsm.malformed();
    case Ev::refused:
      return fsm.refused(e.ec);
    case Ev::failed:
      return fsm.failed(now, e.ec);
    case Ev::listened:
      return fsm.listened(now, e.listening);
    case Ev::timer:
      return fsm.timer_fired(now);
    case Ev::nudge:
      return fsm.nudge();
    case Ev::handed:
      return fsm.handed(now, e.value, e.place);
    case Ev::cancel:
      return fsm.cancel();
    case Ev::replicated:
      return fsm.replicated(e.ec);
    case Ev::mint_failed:
      return fsm.mint_failed();
    case Ev::resend_late:
      return fsm.resend_late(now);
  }
  return {};
}

const char* name_of(Kind k) {
  switch (k) {
    case Kind::none:
      return "none";
    case Kind::send:
      return "send";
    case Kind::listen:
      return "listen";
    case Kind::sleep:
      return "sleep";
    case Kind::wake:
      return "wake";
    case Kind::replicate:
      return "replicate";
    case Kind::complete:
      return "complete";
  }
  return "?";
}

std::string describe(const AcquireFsm::Action& a) {
  std::string s = name_of(a.kind);
  if (a.give_back) s += " +give_back";
  if (a.new_token) s += " +new_token";
  if (a.grant) s += " +grant";
  if (a.ec) s += " ec=" + a.ec.message();
  if (a.kind == Kind::sleep) {
    s += a.until == Clock::time_point::max() ? " until=max"
                                             : " until=" + std::to_string((a.until - t0) / 1ms);
  }
  return s;
}

AcquireFsm::Action action_of(const Want& w) {
  AcquireFsm::Action a;
  a.kind = w.kind;
  a.give_back = w.give_back;
  a.new_token = w.new_token;
  a.grant = w.grant;
  a.ec = w.ec;
  if (w.kind == Kind::sleep) a.until = w.until == -2 ? Clock::time_point::max() : at(w.until);
  return a;
}

struct Row {
  const char* name;
  AcquirePlan plan;
  std::vector<std::pair<Event, Want>> steps;
  AcquireFsm::Phase end;  // the phase after the last step
};

std::ostream& operator<<(std::ostream& os, const Row& r) { return os << r.name; }

// ---- the table ----------------------------------------------------------------------------

using P = AcquireFsm::Phase;

const Row rows[] = {
    // The common paths.
    {"Uncontended", one_try(), {{start(), send()}, {granted(1), grant()}}, P::done},
    {"HeldWithoutWaitIsNotAcquired",
     one_try(),
     {{start(), send()}, {held(1, 3000), complete()}},
     P::done},
    {"HeldWaitsListeningUntilTheLeaseCouldExpire",
     waiting(),
     {{start(), send()},
      {held(1, 50), listen()},
      {listened(1), sleep(52)},
      {timer(52), send()},
      {granted(53), grant()}},
     P::done},
    {"ALongLeaseSleepsOneRefreshIntervalToKeepThePlace",
     waiting(),
     {{start(), send()},
      {held(1, 30'000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {held(402, 29'600), listen()},
      {listened(402), sleep(802)}},
     P::asleep},
    {"NotListeningBacksOffWithDoublingCaps",
     waiting(),
     {{start(), send()},
      {held(0, 30'000), listen()},
      {listened(0, false), sleep(2)},
      {timer(2), send()},
      {held(2, 30'000), listen()},
      {listened(2, false), sleep(6)},
      {timer(6), send()},
      {held(6, 30'000), listen()},
      {listened(6, false), sleep(14)}},
     P::asleep},
    {"ReservedForAnotherClaimBacksOffEvenListening",
     waiting(),
     {{start(), send()}, {held(0, -2), listen()}, {listened(0, true), sleep(2)}},
     P::asleep},
    {"UnknownTtlBacksOff",
     waiting(),
     {{start(), send()}, {held(0, -1), listen()}, {listened(0, true), sleep(2)}},
     P::asleep},
    {"ABackoffNeverSleepsPastTheLeasesEnd",
     waiting(),
     {{start(), send()}, {held(0, 1), listen()}, {listened(0, false), sleep(1)}},
     P::asleep},
    {"TheWaitRunsOutHeldGivesThePlaceBack",
     waiting(100),
     {{start(), send()},
      {held(1, 30'000), listen()},
      {listened(1), sleep(100)},
      {timer(100), send()},
      {held(101, 29'000), giving_back(complete())}},
     P::done},
    {"AWaitForeverNeverOverflowsTheClock",
     forever(),
     {{start(), send()}, {held(0, 30'000), listen()}, {listened(0), sleep(400)}},
     P::asleep},

    // The hand-off (docs/safety.md): a message is a wake-up, the claim's reply decides.
    {"AHandOffWakesTheSleeperWhoClaims",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {nudge(50), wake()},
      {timer(50), send()},
      {granted(51, 9), grant()}},
     P::done},
    {"AHandOffCrossingAnAttemptTriesAgainAtOnce",
     waiting(),
     {{start(), send()},
      {nudge(), none()},
      {held(2, 3000), listen()},
      {listened(2), send()},
      {granted(3), grant()}},
     P::done},
    {"AKeptMessageGivenAsWeRegisterTriesAgainAtOnce",
     waiting(),
     {{start(), send()}, {held(2, 3000), listen()}, {nudge(), none()}, {listened(2), send()}},
     P::attempting},
    {"AHandOffCrossingTheClaimIsSpentByIt",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {nudge(50), wake()},
      {timer(50), send()},
      {nudge(51), none()},
      {held(52, 3000), listen()},
      {listened(52), send()}},
     P::attempting},
    {"TwoHandOffsWhileAsleepWakeOnce",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {nudge(5), wake()},
      {nudge(6), wake()},
      {timer(6), send()},
      {timer(7), none()}},
     P::attempting},
    {"ANudgeAfterTheGrantChangesNothing",
     one_try(),
     {{start(), send()}, {granted(1), grant()}, {nudge(2), none()}},
     P::done},
    {"AHandedLeaseIsDatedFromTheClaimsSend",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {nudge(300), wake()},
      {timer(300), send()},
      {granted(310), grant()}},
     P::done},
    {"ALostMessageCostsOneRefreshAtMost",
     waiting(5000),
     {{start(), send()},
      {held(1, 20'000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {granted(402), grant()}},
     P::done},

    // The one-hop hand-off: a message signed with the waiter's secret is the release's own,
    // and grants when it names the place our last answered attempt left.
    {"ASignedHandOffGrantsTheSleeperWithoutAClaim",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {handed(50, 9, 7200), grant()},
      {timer(50), none()}},
     P::done},
    {"ASignedHandOffNamingAnotherPlaceIsANudge",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {handed(50, 9, 7199), wake()},
      {timer(50), send()}},
     P::attempting},
    {"ASignedHandOffThatLeavesLessThanTwoThirdsOfTheTtlIsClaimed",
     waiting(5000),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {handed(1700, 9, 7200), wake()},
      {timer(1700), send()}},
     P::attempting},
    {"ASignedHandOffCrossingTheAttemptThatLeftItsPlaceGrantsOnItsReply",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {handed(402, 9, 7600), none()},
      {held(403, 3000, 7600), grant()}},
     P::done},
    {"ASignedHandOffCrossingAnAttemptThatLeftAnotherPlaceIsClaimed",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {handed(402, 9, 7200), none()},
      {held(403, 3000, 7600), listen()},
      {listened(403), send()}},
     P::attempting},
    {"ASignedHandOffKeptForUsAsWeRegisterGrants",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {handed(1, 9, 7200), grant()},
      {listened(1), none()}},
     P::done},
    {"ASignedHandOffBeforeAnyPlaceIsANudge",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {handed(50, 9, 7200), wake()}},
     P::asleep},
    {"WaitForReplicasMakesASignedHandOffANudge",
     durable(1000),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {handed(50, 9, 7200), wake()}},
     P::asleep},
    {"AfterAPlaceThatDidNotRiseASignedHandOffIsClaimed",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {held(402, 3000, 7100), listen()},  // the server's clock stepped back
      {listened(402), sleep(802)},
      {handed(450, 9, 7100), wake()}},
     P::asleep},
    {"ASignedHandOffStoredBeforeAnOutageIsForgotten",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {handed(402, 9, 7600), none()},
      {failed(403, error::connection_lost), giving_back(with_new_token(sleep(405)))},
      {timer(405), send()},
      {held(406, 3000, 7600), listen()}},
     P::listening},
    {"ACancelledAcquireIgnoresASignedHandOff",
     waiting(),
     {{start(), send()},
      {held(1, 3000, 7200), listen()},
      {listened(1), sleep(401)},
      {cancel(2), giving_back(complete(aborted))},
      {handed(50, 9, 7200), none()}},
     P::done},
    {"AHandOffToAOneTryAcquireIsIgnoredAfterItEnds",
     one_try(),
     {{start(), send()}, {held(1, 20), complete()}, {nudge(2), none()}},
     P::done},

    // Cancellation: what is held or queued goes back; a reply in flight decides first.
    {"CancelledBeforeTheFirstAttempt",
     waiting(),
     {{cancel(), complete(aborted)}, {start(1), none()}},
     P::done},
    {"CancelledAsleepGivesThePlaceBack",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {cancel(5), giving_back(complete(aborted))},
      {timer(5), none()}},
     P::done},
    {"CancelledAttemptingHeldGivesThePlaceBack",
     waiting(),
     {{start(), send()}, {cancel(), none()}, {held(1, 3000), giving_back(complete(aborted))}},
     P::done},
    {"CancelledAttemptingOneTryHeldHasNoPlace",
     one_try(),
     {{start(), send()}, {cancel(), none()}, {held(1, 3000), complete(aborted)}},
     P::done},
    {"CancelledAttemptingGrantedGivesTheLeaseBack",
     waiting(),
     {{start(), send()}, {cancel(), none()}, {granted(1), giving_back(complete(aborted))}},
     P::done},
    {"CancelledAttemptingThenTheLinkFailsEndsWithTheLinksError",
     waiting(),
     {{start(), send()},
      {cancel(), none()},
      {failed(1, error::connection_lost), giving_back(complete(error::connection_lost))}},
     P::done},
    {"CancelledDuringReplicationDropsTheLease",
     durable(),
     {{start(), send()},
      {granted(1), replicate()},
      {cancel(2), none()},
      {replicated(3), complete(aborted)}},
     P::done},
    {"CancelledTwiceCompletesOnce",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {cancel(2), giving_back(complete(aborted))},
      {cancel(3), none()}},
     P::done},
    {"CancelledAfterTheGrantChangesNothing",
     one_try(),
     {{start(), send()}, {granted(1), grant()}, {cancel(2), none()}},
     P::done},
    {"CancelledWhileRegisteringEndsAtOnce",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {cancel(1), giving_back(complete(aborted))},
      {listened(1), none()}},
     P::done},
    {"ANudgeAfterCancelIsIgnored",
     waiting(),
     {{start(), send()},
      {cancel(), none()},
      {nudge(), none()},
      {held(1, 3000), giving_back(complete(aborted))}},
     P::done},

    // Replication (min_replicas).
    {"ReplicatedGrantIsDelivered",
     durable(),
     {{start(), send()}, {granted(1), replicate()}, {replicated(5), grant()}},
     P::done},
    {"NotReplicatedDropsTheLease",
     durable(),
     {{start(), send()},
      {granted(1), replicate()},
      {replicated(5, error::not_replicated), complete(error::not_replicated)}},
     P::done},
    {"WaitsLinkFailedDropsTheLease",
     durable(),
     {{start(), send()},
      {granted(1), replicate()},
      {replicated(5, error::connection_lost), complete(error::connection_lost)}},
     P::done},
    {"ANudgeDuringReplicationIsIgnored",
     durable(1000),
     {{start(), send()}, {granted(1), replicate()}, {nudge(2), none()}, {replicated(3), grant()}},
     P::done},

    // Outages within the wait: give back what may have run, a new token, back off, try again.
    {"ALostLinkIsWaitedOutWithANewToken",
     waiting(),
     {{start(), send()},
      {failed(10, error::connection_lost), with_new_token(giving_back(sleep(12)))},
      {timer(12), send()},
      {granted(13), grant()}},
     P::done},
    {"AFailedConnectIsWaitedOutKeepingTheToken",
     waiting(),
     {{start(), send()},
      {failed(10, error::connect_failed), sleep(12)},
      {timer(12), send()},
      {failed(13, error::connect_failed), sleep(17)},
      {timer(17), send()}},
     P::attempting},
    {"ADemotedMasterIsAnOutage",
     waiting(),
     {{start(), send()}, {failed(10, error::read_only), with_new_token(giving_back(sleep(12)))}},
     P::asleep},
    {"AnOutageRunningPastTheDeadlineEndsWithItsError",
     waiting(100),
     {{start(), send()},
      {failed(90, error::connect_failed), sleep(92)},
      {timer(92), send()},
      {failed(95, error::connect_failed), sleep(99)},
      {timer(99), send()},
      {failed(99, error::connect_failed), sleep(100)},
      {timer(100), complete(error::connect_failed)}},
     P::done},
    {"AnOutageAtTheDeadlineEndsAtOnce",
     waiting(100),
     {{start(), send()},
      {failed(100, error::connection_lost), giving_back(complete(error::connection_lost))}},
     P::done},
    {"AFailedConnectWhileQueuedKeepsThePlaceForTheSameToken",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {failed(402, error::connect_failed), sleep(404)}},
     P::asleep},
    {"ALostLinkWhileQueuedGivesThePlaceBack",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {failed(402, error::connection_lost), with_new_token(giving_back(sleep(404)))}},
     P::asleep},
    {"AFailedConnectWhileQueuedAtTheDeadlineGivesThePlaceBack",
     waiting(500),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {failed(402, error::connect_failed), sleep(404)},
      {timer(404), send()},
      {failed(500, error::connect_failed), giving_back(complete(error::connect_failed))}},
     P::done},
    {"RecoveredOutageEndsHeldNotWithTheOldError",
     waiting(100),
     {{start(), send()},
      {failed(10, error::connect_failed), sleep(12)},
      {timer(12), send()},
      {held(13, 30'000), listen()},
      {listened(13), sleep(100)},
      {timer(100), send()},
      {held(100, 29'000), giving_back(complete())}},
     P::done},
    {"AnOutageWithoutWaitFails",
     one_try(),
     {{start(), send()}, {failed(1, error::connect_failed), complete(error::connect_failed)}},
     P::done},
    {"ALostLinkWithoutWaitGivesBack",
     one_try(),
     {{start(), send()},
      {failed(1, error::connection_lost), giving_back(complete(error::connection_lost))}},
     P::done},
    {"ATimeoutWithoutWaitEndsItsLateReplyDecides",
     one_try(),
     {{start(), send()}, {failed(1, error::timeout), complete(error::timeout)}},
     P::done},
    // A timeout within the wait (a server busy with a storm of handshakes): the attempt is
    // overdue, nothing is sent beside it, and its late reply decides.
    {"ATimeoutWithinTheWaitAwaitsTheLateGrant",
     waiting(),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {timer(500), none()},  // not the deadline yet (a stale wake)
      {granted(900, 7), grant()},
      {timer(1000), none()}},
     P::done},
    {"ALateHeldReplyQueuesAsAnOnTimeOne",
     waiting(),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {held(600, 3000), listen()},
      {listened(600), sleep(1000)},
      {timer(1000), send()}},
     P::attempting},
    {"ALateGrantWithTooLittleTtlLeftIsGivenBackAndTriedAgain",
     waiting(5000),
     {{start(), send()},
      {failed(1000, error::timeout), sleep(5000)},
      {granted(1800, 7), with_new_token(giving_back(send()))},
      {granted(1810, 8), grant()}},
     P::done},
    // WAIT would run on a new link, which wrote nothing: it cannot confirm a late grant.
    {"ALateGrantThatReplicasMustConfirmIsGivenBackAndTriedAgain",
     durable(1000),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {granted(300, 7), with_new_token(giving_back(send()))},
      {granted(310, 8), replicate()},
      {replicated(320), grant()}},
     P::done},
    {"TheWaitRunsOutBeforeTheLateReply",
     waiting(),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {timer(1000), complete(error::timeout)},
      {granted(1200, 7), none()}},
     P::done},
    {"ATimeoutWhileQueuedAwaitsTheRefresh",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {failed(402, error::timeout), sleep(1000)},
      {timer(1000), giving_back(complete(error::timeout))}},
     P::done},
    {"ACancelWhileOverdueCompletesAtOnce",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {failed(402, error::timeout), sleep(1000)},
      {cancel(500), giving_back(complete(aborted))},
      {held(600, 3000), none()}},
     P::done},
    {"TheDrainEndsWithoutALateReply",
     waiting(5000),
     {{start(), send()},
      {failed(1000, error::timeout), sleep(5000)},
      {failed(3000, error::connection_lost), with_new_token(giving_back(sleep(3002)))},
      {timer(3002), send()}},
     P::attempting},
    {"ALateRedirectIsResentNow",
     waiting(),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {resend_late(300), send()},
      {granted(310, 7), grant()}},
     P::done},
    {"ATimeoutOfTheResendIsOverdueAgain",
     waiting(),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {resend_late(300), send()},
      {failed(400, error::timeout), sleep(1000)},
      {refused(900, error::server_error), complete(error::server_error)}},
     P::done},
    {"ANudgeWhileOverdueWaitsForTheReply",
     waiting(),
     {{start(), send()},
      {failed(1, error::timeout), sleep(1000)},
      {nudge(100), none()},
      {held(200, 3000), listen()},
      {listened(200), send()}},
     P::attempting},
    {"AProtocolErrorIsNoOutage",
     waiting(),
     {{start(), send()},
      {failed(1, error::protocol_error), giving_back(complete(error::protocol_error))}},
     P::done},
    {"NoEntropyForANewTokenFails",
     waiting(),
     {{start(), send()},
      {failed(10, error::connection_lost), with_new_token(giving_back(sleep(12)))},
      {mint_failed(10), complete(error::server_error)},
      {timer(12), none()}},
     P::done},
    {"TheBackoffCapStopsAt500ms",
     forever(),
     {{start(), send()},     {failed(0, error::connect_failed), sleep(2)},
      {timer(2), send()},    {failed(2, error::connect_failed), sleep(6)},
      {timer(6), send()},    {failed(6, error::connect_failed), sleep(14)},
      {timer(14), send()},   {failed(14, error::connect_failed), sleep(30)},
      {timer(30), send()},   {failed(30, error::connect_failed), sleep(62)},
      {timer(62), send()},   {failed(62, error::connect_failed), sleep(126)},
      {timer(126), send()},  {failed(126, error::connect_failed), sleep(254)},
      {timer(254), send()},  {failed(254, error::connect_failed), sleep(510)},
      {timer(510), send()},  {failed(510, error::connect_failed), sleep(1010)},
      {timer(1010), send()}, {failed(1010, error::connect_failed), sleep(1510)}},
     P::asleep},

    // Replies that end it.
    {"AnErrorReplyEnds",
     waiting(),
     {{start(), send()}, {refused(1, error::wrong_type), complete(error::wrong_type)}},
     P::done},
    {"AnErrorReplyWhileQueuedGivesThePlaceBack",
     waiting(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1), sleep(401)},
      {timer(401), send()},
      {refused(402, error::no_permission), giving_back(complete(error::no_permission))}},
     P::done},
    {"AMalformedReplyEnds",
     waiting(),
     {{start(), send()}, {malformed(1), complete(error::unexpected_reply)}},
     P::done},
    {"AGrantWithoutAFenceIsGivenBack",
     waiting(),
     {{start(), send()}, {granted(1, 0), giving_back(complete(error::unexpected_reply))}},
     P::done},

    // Redlock: a fresh token per attempt, no queue, no outage waits.
    {"RedlockFirstAttemptKeepsItsToken",
     redlock(),
     {{start(), send()}, {granted(1), grant()}},
     P::done},
    {"RedlockEachNewAttemptHasANewToken",
     redlock(),
     {{start(), send()},
      {held(1, 3000), listen()},
      {listened(1, false), sleep(3)},
      {timer(3), send(true)},
      {held(4, 3000), listen()},
      {listened(4, false), sleep(8)},
      {timer(8), send(true)}},
     P::attempting},
    {"RedlockNoQuorumEnds",
     redlock(),
     {{start(), send()}, {failed(1, error::no_quorum), complete(error::no_quorum)}},
     P::done},
    {"RedlockLostLinksAreNotWaitedOut",
     redlock(),
     {{start(), send()}, {failed(1, error::connection_lost), complete(error::connection_lost)}},
     P::done},
    {"RedlockHeldPastTheWaitHasNoPlaceToGiveBack",
     redlock(10),
     {{start(), send()}, {held(10, 3000), complete()}},
     P::done},

    // Events that do not belong to the phase are ignored.
    {"ALateTimerWhileAttemptingIsIgnored",
     waiting(),
     {{start(), send()}, {timer(5), none()}, {held(6, 30), listen()}},
     P::listening},
    {"ARepliedTwiceIsIgnored",
     one_try(),
     {{start(), send()}, {granted(1), grant()}, {granted(2), none()}, {held(2, 1), none()}},
     P::done},
    {"AStartTwiceIsIgnored", waiting(), {{start(), send()}, {start(1), none()}}, P::attempting},
    {"AReplicationAnswerWithoutAGrantIsIgnored",
     durable(),
     {{start(), send()}, {replicated(1), none()}},
     P::attempting},
};

class AcquireFsmRows : public ::testing::TestWithParam<Row> {};

TEST_P(AcquireFsmRows, EachStepReturnsItsAction) {
  const Row& row = GetParam();
  AcquireFsm fsm(row.plan, no_jitter);
  int step = 0;
  for (const auto& [event, want] : row.steps) {
    ++step;
    const auto got = feed(fsm, event);
    EXPECT_EQ(got, action_of(want))
        << "step " << step << ": got " << describe(got) << ", want " << describe(action_of(want));
  }
  EXPECT_EQ(fsm.phase(), row.end);
}

INSTANTIATE_TEST_SUITE_P(AcquireFsm, AcquireFsmRows, ::testing::ValuesIn(rows),
                         [](const auto& row_info) { return std::string(row_info.param.name); });

}  // namespace

// ---- the pure parts ------------------------------------------------------------------------

TEST(AcquireFsm, ALeaseHandedOnASignedMessageIsDatedFromTheAttemptWhosePlaceItNames) {
  // The release saw the place that attempt left, so it ran after that attempt was sent: the
  // lease it set lasts the ttl from then at least. Not from the message's arrival.
  AcquireFsm fsm(waiting(5000), no_jitter);
  fsm.start(at(0));
  fsm.held(at(3), 3000, 7200);
  fsm.listened(at(3), true);
  fsm.timer_fired(at(401));
  fsm.held(at(405), 3000, 7600);  // the refresh sent at 401 left place 7600
  fsm.listened(at(405), true);
  const auto a = fsm.handed(at(600), 9, 7600);
  EXPECT_TRUE(a.grant);
  EXPECT_EQ(fsm.fence(), 9);
  EXPECT_EQ(fsm.granted_at(), at(401));
  EXPECT_FALSE(fsm.in_queue()) << "the release took us out of the queue";
  // A claim's grant is dated from its own send.
  AcquireFsm claimed(waiting(5000), no_jitter);
  claimed.start(at(0));
  claimed.held(at(3), 3000, 7200);
  claimed.listened(at(3), true);
  claimed.nudge();
  claimed.timer_fired(at(50));
  claimed.granted(at(52), 11);
  EXPECT_EQ(claimed.granted_at(), at(50));
}

TEST(AcquireFsm, SleepWhenHeld) {
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
    EXPECT_EQ(AcquireFsm::sleep_when_held(c.listening, c.pttl, c.draw), c.want) << c.name;
  }
}

TEST(AcquireFsm, AfterAFailedAttempt) {
  struct Case {
    error_code ec;
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
      // A timeout: its late reply decides (awaited while the wait lasts: awaits_late); no
      // outage.
      {error::timeout, false, true, false, false, false},
      // Redlock: the fan-out gave back; a majority decides, no waiting out.
      {error::connection_lost, true, true, false, false, false},
      {error::no_quorum, true, true, false, false, false},
  };
  for (const auto& c : cases) {
    const auto got = AcquireFsm::after_failure(
        c.ec, c.redlock ? Attempt::vote : Attempt::one_server, c.waiting, c.cancelled);
    EXPECT_EQ(got.give_back, c.give_back) << c.ec.message() << " redlock=" << c.redlock;
    EXPECT_EQ(got.wait_out, c.wait_out) << c.ec.message() << " redlock=" << c.redlock
                                        << " waiting=" << c.waiting << " cancelled=" << c.cancelled;
  }
}

TEST(AcquireFsm, WhichTimeoutIsAwaited) {
  struct Case {
    error_code ec;
    bool redlock, waiting, cancelled, awaits;
  };
  const Case cases[] = {
      {error::timeout, false, true, false, true},
      {error::timeout, false, false, false, false},         // no wait (or run out): the end
      {error::timeout, false, true, true, false},           // cancelled
      {error::timeout, true, true, false, false},           // Redlock: the fan-out settles it
      {error::connect_timeout, false, true, false, false},  // never written: an outage
      {error::connection_lost, false, true, false, false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(AcquireFsm::awaits_late(c.ec, c.redlock ? Attempt::vote : Attempt::one_server,
                                      c.waiting, c.cancelled),
              c.awaits)
        << c.ec.message() << " redlock=" << c.redlock << " waiting=" << c.waiting
        << " cancelled=" << c.cancelled;
  }
}

TEST(AcquireFsm, ALateReplyIsGivenBackWhenItMayHaveTakenSomething) {
  struct Case {
    const char* name;
    error_code ec;
    bool error_reply, may_have_granted, waits;
    bool want;
  };
  const Case cases[] = {
      {"granted late", {}, false, true, false, true},
      {"held late, one try: nothing taken", {}, false, false, false, false},
      {"held late, waiting: a queue place", {}, false, false, true, true},
      {"an error reply: never ran", {}, true, false, true, false},
      {"the link failed before the late reply", error::connection_lost, false, false, false, true},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(AcquireFsm::give_back_late(c.ec, c.error_reply, c.may_have_granted, c.waits), c.want)
        << c.name;
  }
}

TEST(AcquireFsm, AGiveBackIsRetriedUntilWhatItTookHasExpired) {
  AcquireFsm short_lease(plan(2000ms, 1000ms, at(1000), true), no_jitter);
  EXPECT_EQ(short_lease.start(at(10)).kind, Kind::send);
  // A release may hand the lease to our place up to waiter_ttl after the attempt, for the ttl.
  EXPECT_EQ(short_lease.give_back_until(), at(10) + 2000ms + waiter_ttl);
  AcquireFsm long_lease(plan(3'600'000ms, 0ms, at(0), false), no_jitter);
  EXPECT_EQ(long_lease.start(at(10)).kind, Kind::send);
  EXPECT_EQ(long_lease.give_back_until(), at(10) + give_back_horizon);
}

TEST(AcquireFsm, TheGrantCarriesTheFenceAndTheClaimsSendTime) {
  AcquireFsm fsm(waiting(), no_jitter);
  fsm.start(at(0));
  fsm.held(at(1), 3000);
  fsm.listened(at(1), true);
  fsm.nudge();
  fsm.timer_fired(at(200));
  const auto got = fsm.granted(at(230), 42);
  EXPECT_TRUE(got.grant);
  EXPECT_EQ(fsm.fence(), 42);
  EXPECT_EQ(fsm.granted_at(), at(200));  // the claim's send, not its reply
  EXPECT_EQ(fsm.attempts(), 2);
  EXPECT_TRUE(fsm.waited());
}

TEST(AcquireFsm, AOneTryAcquireNeverCountsAsWaited) {
  AcquireFsm fsm(one_try(), no_jitter);
  fsm.start(at(0));
  fsm.held(at(1), 3000);
  EXPECT_FALSE(fsm.waited());
  EXPECT_EQ(fsm.attempts(), 1);
  EXPECT_FALSE(fsm.in_queue());
}

TEST(Backoff, DoublesUpToItsCapAndResets) {
  Backoff b{25ms, 100ms};
  EXPECT_EQ(b.next(), 25ms);
  EXPECT_EQ(b.next(), 50ms);
  EXPECT_EQ(b.next(), 100ms);
  EXPECT_EQ(b.next(), 100ms);
  b.reset();
  EXPECT_EQ(b.cap(), 25ms);
}

TEST(Backoff, FullJitterStaysWithinOneAndTheCap) {
  for (int i = 0; i < 1000; ++i) {
    const auto d = full_jitter(7ms);
    ASSERT_GE(d, 1ms);
    ASSERT_LE(d, 7ms);
  }
  EXPECT_EQ(full_jitter(0ms), 1ms);
}

TEST(Backoff, EqualJitterStaysInTheCapsUpperHalfAndSpreads) {
  std::set<long long> seen;
  for (int i = 0; i < 1000; ++i) {
    const auto d = equal_jitter(1000ms);
    ASSERT_GT(d, 500ms);
    ASSERT_LE(d, 1000ms);
    seen.insert(d.count());
  }
  // A fleet's reconnects spread out: 1,000 draws over 500 values take far more than 10.
  EXPECT_GT(seen.size(), 100u);
  EXPECT_EQ(equal_jitter(25ms).count() > 12, true);
  EXPECT_LE(equal_jitter(1ms), 1ms);
}

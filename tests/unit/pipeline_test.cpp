// SPDX-License-Identifier: MIT
// A connection's pipeline without a socket (pipeline.hpp): what is queued and its bytes, what
// each link awaits, draining after a timeout, the deadlines, and what a reply means besides
// its answer. One test per row of the pipeline's table, with a fake clock.
#include "pipeline.hpp"
#include "redis_lock_scripts.hpp"
#include "reply_builders.hpp"
#include "resp.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;
using redis_lock::error;
using redis_lock::test::error_reply;
using redis_lock::test::text;
using Clock = Pipeline::Clock;

namespace {

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(long long ms) { return t0 + std::chrono::milliseconds(ms); }

/// What the commands' callbacks and late handlers heard, in order: "name:ok:reply",
/// "name:timeout", "name late:connection_lost", ...
struct Heard {
  std::vector<std::string> log;

  Pipeline::Callback callback(std::string name) {
    return [this, name](error_code ec, Reply reply) {
      log.push_back(name + ":" + (ec ? ec.message() : "ok:" + reply.str));
    };
  }

  struct Late final : LateReplies {
    Late(Heard& into, std::string called) : heard(into), name(std::move(called)) {}
    void on_late_reply(error_code ec, const Reply& reply) override {
      heard.log.push_back(name + " late:" + (ec ? ec.message() : "ok:" + reply.str));
    }
    Heard& heard;
    std::string name;
  };
  std::shared_ptr<LateReplies> late(std::string name) {
    return std::make_shared<Late>(*this, std::move(name));
  }
};

std::string resp(std::initializer_list<std::string_view> words) {
  std::string out;
  append_command(out, words);
  return out;
}

void push(Pipeline& p, Heard& h, std::string name, Clock::time_point deadline,
          bool with_late = false) {
  const std::string_view command[] = {"GET", name};
  p.push(command, false, h.callback(name), with_late ? h.late(name) : nullptr, deadline);
}

/// The current link's oldest command timed out: its callbacks hear it, as the connection's
/// do, and the link drains until `until`.
void time_out(Pipeline& p, Clock::time_point until) {
  for (auto& cb : p.drain_current(until)) std::move(cb)(error::timeout, Reply{});
}

/// Completes what came out with `ec`, as the connection does.
void fail(Pipeline::Commands commands, error_code ec) { Pipeline::fail_all(commands, ec); }

void answer(Pipeline& p, Pipeline::LinkId link, std::string reply_text) {
  auto c = p.pop(link, t0);
  ASSERT_TRUE(c.has_value());
  if (c->callback) {
    std::move(c->callback)(error_code{}, text(std::move(reply_text)));
  } else if (c->late) {
    c->late->on_late_reply(error_code{}, text(std::move(reply_text)));
  }
}

// -- push

TEST(Pipeline, PushAppendsTheCommandsBytesInOrderAndKeepsItsDeadline) {
  Pipeline p;
  Heard h;
  EXPECT_FALSE(p.queued());
  EXPECT_EQ(p.oldest_deadline(), Pipeline::never);
  push(p, h, "a", at(100));
  push(p, h, "b", at(200));
  EXPECT_TRUE(p.queued());
  EXPECT_EQ(p.oldest_deadline(), at(100));
  EXPECT_EQ(p.next_deadline(), at(100));
  EXPECT_TRUE(p.has_work());
  p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, resp({"GET", "a"}) + resp({"GET", "b"}));
  EXPECT_TRUE(h.log.empty());  // nothing completed by queueing
}

TEST(Pipeline, PushEncodesOurScriptsForFcallOrEvalsha) {
  const auto* s = all_scripts[0];
  const std::string_view command[] = {"EVALSHA", s->sha1, "1", "k"};
  Heard h;
  for (const bool functions : {false, true}) {
    SCOPED_TRACE(functions);
    Pipeline p;
    p.push(command, functions, h.callback("x"), nullptr, at(1));
    p.open();
    std::string out;
    ASSERT_TRUE(p.take_batch(out));
    EXPECT_EQ(out, functions ? resp({"FCALL", s->function, "1", "k"})
                             : resp({"EVALSHA", s->sha1, "1", "k"}));
  }
}

// -- push_front

TEST(Pipeline, PushFrontGoesAheadOfEverythingQueuedInOrder) {
  Pipeline p;
  Heard h;
  push(p, h, "user", at(100));
  const auto load1 = resp({"FUNCTION", "LOAD", "lib"});
  const auto load2 = resp({"SCRIPT", "LOAD", "body"});
  std::vector<Pipeline::Command> loads;
  loads.push_back({h.callback("load1"), nullptr, Pipeline::never, load1.size()});
  loads.push_back({h.callback("load2"), nullptr, Pipeline::never, load2.size()});
  p.push_front(load1 + load2, std::move(loads));
  // The loads have no deadline; the user command's is still the one that counts.
  EXPECT_EQ(p.next_deadline(), at(100));
  const auto link = p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, load1 + load2 + resp({"GET", "user"}));
  answer(p, link, "OK");
  answer(p, link, "sha");
  answer(p, link, "v");
  EXPECT_EQ(h.log, (std::vector<std::string>{"load1:ok:OK", "load2:ok:sha", "user:ok:v"}));
}

TEST(Pipeline, ACommandQueuedBehindLoadsStillExpiresAndTheLoadsStay) {
  Pipeline p;
  Heard h;
  push(p, h, "user", at(100));
  push(p, h, "later", at(200));
  const auto load = resp({"SCRIPT", "LOAD", "body"});
  std::vector<Pipeline::Command> loads;
  loads.push_back({h.callback("load"), nullptr, Pipeline::never, load.size()});
  p.push_front(load, std::move(loads));
  EXPECT_EQ(p.oldest_deadline(), at(100));
  auto expired = p.take_expired(at(100));
  ASSERT_EQ(expired.size(), 1u);
  fail(std::move(expired), error::connect_timeout);
  EXPECT_EQ(h.log,
            std::vector<std::string>{"user:" + error_code(error::connect_timeout).message()});
  EXPECT_EQ(p.oldest_deadline(), at(200));
  EXPECT_EQ(p.take_expired(at(200)).size(), 1u);
  // Loads alone are still to write, but worth no connect of their own.
  EXPECT_TRUE(p.queued());
  EXPECT_FALSE(p.waiting());
  EXPECT_EQ(p.next_deadline(), Pipeline::never);
  push(p, h, "next", at(300));
  EXPECT_TRUE(p.waiting());
  p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, load + resp({"GET", "next"}));  // they go with the next command
}

// -- restate

TEST(Pipeline, RestateReencodesQueuedScriptCallsAndKeepsEachCommandsSize) {
  const auto* s = all_scripts[0];
  const std::string_view call[] = {"EVALSHA", s->sha1, "1", "k"};
  const std::string_view get[] = {"GET", "k"};
  Pipeline p;
  Heard h;
  p.push(call, false, h.callback("call"), nullptr, at(100));
  p.push(get, false, h.callback("get"), nullptr, at(100));
  p.push(call, false, h.callback("call2"), nullptr, at(200));
  p.restate(true);
  // The sizes followed: the first command expires alone, and what stays is whole.
  auto expired = p.take_expired(at(100));
  ASSERT_EQ(expired.size(), 2u);
  p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, resp({"FCALL", s->function, "1", "k"}));
  // And back (a link whose library went away).
  p.push(call, true, h.callback("call3"), nullptr, at(300));
  p.restate(false);
  std::string out2;
  ASSERT_TRUE(p.take_batch(out2));
  EXPECT_EQ(out2, resp({"EVALSHA", s->sha1, "1", "k"}));
}

TEST(Pipeline, RestateLeavesTheLoadsAheadAsTheyAre) {
  const auto* s = all_scripts[0];
  const std::string_view call[] = {"EVALSHA", s->sha1, "1", "k"};
  Pipeline p;
  Heard h;
  p.push(call, true, h.callback("call"), nullptr, at(100));
  const auto load = resp({"SCRIPT", "LOAD", "body"});
  std::vector<Pipeline::Command> loads;
  loads.push_back({h.callback("load"), nullptr, Pipeline::never, load.size()});
  p.push_front(load, std::move(loads));
  p.restate(false);  // the library went away: EVALSHA, its body loaded ahead
  p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, load + resp({"EVALSHA", s->sha1, "1", "k"}));
}

// -- open

TEST(Pipeline, OpenMakesANewCurrentLinkWithNothingInFlight) {
  Pipeline p;
  EXPECT_EQ(p.current(), 0u);
  EXPECT_FALSE(p.live(0));
  const auto a = p.open();
  EXPECT_NE(a, 0u);
  EXPECT_EQ(p.current(), a);
  EXPECT_TRUE(p.live(a));
  EXPECT_FALSE(p.busy(a));
  EXPECT_FALSE(p.has_work());
  EXPECT_EQ(p.idle_since(), Clock::time_point{});  // never answered: checked before writing
  p.close_current();
  const auto b = p.open();
  EXPECT_NE(a, b);  // never reused: a closed link's late completions find nothing
  EXPECT_FALSE(p.live(a));
}

// -- expect

TEST(Pipeline, ExpectAwaitsAHandshakeStepWithoutADeadline) {
  Pipeline p;
  Heard h;
  const auto link = p.open();
  p.expect({h.callback("hello"), nullptr, Pipeline::never, 0});
  EXPECT_TRUE(p.busy(link));
  EXPECT_TRUE(p.has_work());
  EXPECT_EQ(p.next_deadline(), Pipeline::never);
  EXPECT_FALSE(p.current_late(at(1'000'000)));
  answer(p, link, "OK");
  EXPECT_EQ(h.log, std::vector<std::string>{"hello:ok:OK"});
  EXPECT_FALSE(p.busy(link));
}

// -- take_batch

TEST(Pipeline, TakeBatchMovesTheQueueToTheCurrentLinksInFlight) {
  Pipeline p;
  Heard h;
  std::string out;
  EXPECT_FALSE(p.take_batch(out));  // no link
  push(p, h, "a", at(100));
  EXPECT_FALSE(p.take_batch(out));  // still no link
  const auto link = p.open();
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_FALSE(p.queued());
  EXPECT_TRUE(p.busy(link));
  EXPECT_EQ(p.next_deadline(), at(100));  // now the written command's deadline
  std::string again;
  EXPECT_FALSE(p.take_batch(again));  // nothing queued
  EXPECT_TRUE(again.empty());
}

TEST(Pipeline, TheWrittenBuffersCapacityServesTheNextQueue) {
  Pipeline p;
  Heard h;
  p.open();
  std::string out;
  out.reserve(4096);
  const auto* storage = out.data();
  push(p, h, "a", at(100));
  ASSERT_TRUE(p.take_batch(out));
  out.clear();
  push(p, h, "b", at(100));
  std::string second;
  ASSERT_TRUE(p.take_batch(second));
  EXPECT_EQ(second.data(), storage);  // the two buffers take turns
}

// -- pop

TEST(Pipeline, PopAnswersALinksOldestCommandAndMarksItIdleWhenEmpty) {
  Pipeline p;
  Heard h;
  const auto link = p.open();
  push(p, h, "a", at(100));
  push(p, h, "b", at(100));
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  auto a = p.pop(link, at(10));
  ASSERT_TRUE(a.has_value());
  std::move(a->callback)(error_code{}, text("1"));
  EXPECT_EQ(p.idle_since(), Clock::time_point{});  // b still awaited
  auto b = p.pop(link, at(20));
  ASSERT_TRUE(b.has_value());
  std::move(b->callback)(error_code{}, text("2"));
  EXPECT_EQ(p.idle_since(), at(20));
  EXPECT_EQ(h.log, (std::vector<std::string>{"a:ok:1", "b:ok:2"}));
  EXPECT_FALSE(p.has_work());
}

TEST(Pipeline, PopWithNothingAwaitedIsNobodysAnswer) {
  Pipeline p;
  const auto link = p.open();
  EXPECT_FALSE(p.pop(link, t0).has_value());      // a protocol error for the driver
  EXPECT_FALSE(p.pop(link + 7, t0).has_value());  // a link it does not know
  EXPECT_FALSE(p.pop(0, t0).has_value());
}

// -- drain_current

TEST(Pipeline, DrainCurrentHandsOutTheCallbacksAndKeepsTheLateHandlersForTheReplies) {
  Pipeline p;
  Heard h;
  const auto link = p.open();
  push(p, h, "a", at(100), true);
  push(p, h, "b", at(150), true);
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_FALSE(p.current_late(at(99)));
  EXPECT_TRUE(p.current_late(at(100)));
  auto timed_out = p.drain_current(at(100 + 2000));
  ASSERT_EQ(timed_out.size(), 2u);
  for (auto& cb : timed_out) std::move(cb)(error::timeout, Reply{});
  EXPECT_EQ(p.current(), 0u);
  EXPECT_TRUE(p.live(link));  // draining
  EXPECT_TRUE(p.draining());
  EXPECT_TRUE(p.has_work());
  EXPECT_EQ(p.next_deadline(), at(2100));  // the drain's end, not the commands' deadlines
  // The late replies reach the late handlers, in order, once each.
  answer(p, link, "1");
  answer(p, link, "2");
  EXPECT_EQ(h.log.size(), 4u);
  EXPECT_EQ(h.log[2], "a late:ok:1");
  EXPECT_EQ(h.log[3], "b late:ok:2");
  EXPECT_FALSE(p.busy(link));  // fully drained: the driver closes it
  fail(p.close_draining(link), error::connection_lost);
  EXPECT_EQ(h.log.size(), 4u);
  EXPECT_FALSE(p.live(link));
  EXPECT_FALSE(p.has_work());
}

TEST(Pipeline, AQueueWaitingBehindADrainingLinkGoesToTheNextLink) {
  Pipeline p;
  Heard h;
  const auto first = p.open();
  push(p, h, "stuck", at(100));
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  push(p, h, "next", at(300));
  time_out(p, at(2100));
  EXPECT_TRUE(p.queued());
  EXPECT_EQ(p.next_deadline(), at(300));
  const auto second = p.open();
  std::string out2;
  ASSERT_TRUE(p.take_batch(out2));
  EXPECT_EQ(out2, resp({"GET", "next"}));
  EXPECT_TRUE(p.busy(first));
  EXPECT_TRUE(p.busy(second));
  answer(p, second, "v");  // the new link's replies are its own
  EXPECT_EQ(h.log.back(), "next:ok:v");
  EXPECT_TRUE(p.busy(first));
}

TEST(Pipeline, DrainWithNoCurrentLinkDoesNothing) {
  Pipeline p;
  EXPECT_TRUE(p.drain_current(at(1)).empty());
  EXPECT_FALSE(p.draining());
}

// -- close_current / close_draining

TEST(Pipeline, CloseCurrentHandsOutItsCommandsToFail) {
  Pipeline p;
  Heard h;
  const auto link = p.open();
  push(p, h, "a", at(100));
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  push(p, h, "queued", at(200));  // not written: it stays for the next link
  fail(p.close_current(), error::connection_lost);
  EXPECT_EQ(h.log, std::vector<std::string>{"a:" + error_code(error::connection_lost).message()});
  EXPECT_FALSE(p.live(link));
  EXPECT_EQ(p.current(), 0u);
  EXPECT_TRUE(p.queued());
  EXPECT_FALSE(p.pop(link, t0).has_value());  // its late replies find nothing
}

TEST(Pipeline, CloseDrainingTellsTheLateHandlersNoReplyWillCome) {
  Pipeline p;
  Heard h;
  const auto link = p.open();
  push(p, h, "a", at(100), true);
  push(p, h, "b", at(100));  // no late handler: nothing to tell
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  time_out(p, at(2100));
  EXPECT_EQ(p.drained(at(2099)), std::vector<Pipeline::LinkId>{});
  EXPECT_EQ(p.drained(at(2100)), std::vector<Pipeline::LinkId>{link});
  fail(p.close_draining(link), error::connection_lost);
  ASSERT_EQ(h.log.size(), 3u);
  EXPECT_EQ(h.log[2], "a late:" + error_code(error::connection_lost).message());
  EXPECT_TRUE(p.close_draining(link).empty());  // once
  EXPECT_FALSE(p.has_work());
}

// -- take_queued

TEST(Pipeline, TakeQueuedEmptiesTheQueueAndItsBytes) {
  Pipeline p;
  Heard h;
  push(p, h, "a", at(100));
  push(p, h, "b", at(200));
  auto failed = p.take_queued();
  EXPECT_EQ(failed.size(), 2u);
  EXPECT_FALSE(p.queued());
  EXPECT_EQ(p.next_deadline(), Pipeline::never);
  fail(std::move(failed), error::connect_failed);
  EXPECT_EQ(h.log.size(), 2u);
  push(p, h, "c", at(300));  // the bytes start afresh
  p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, resp({"GET", "c"}));
}

// -- take_expired

TEST(Pipeline, TakeExpiredTakesTheQueuesOverdueHeadAndItsBytesOnly) {
  Pipeline p;
  Heard h;
  push(p, h, "a", at(100));
  push(p, h, "b", at(100));
  push(p, h, "c", at(150));
  EXPECT_TRUE(p.take_expired(at(99)).empty());
  auto expired = p.take_expired(at(100));
  EXPECT_EQ(expired.size(), 2u);
  EXPECT_EQ(p.oldest_deadline(), at(150));
  p.open();
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(out, resp({"GET", "c"}));  // what stays is whole
}

// -- current_late / next_deadline

TEST(Pipeline, AWrittenCommandsLongerDeadlineHoldsUpThoseBehindIt) {
  Pipeline p;
  Heard h;
  p.open();
  push(p, h, "wait", at(5000));  // a WAIT with its own timeout on top
  push(p, h, "next", at(100));
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  // The reply to `next` cannot come before WAIT's: only the front's deadline counts.
  EXPECT_EQ(p.next_deadline(), at(5000));
  EXPECT_FALSE(p.current_late(at(100)));
  EXPECT_TRUE(p.current_late(at(5000)));
}

TEST(Pipeline, HandshakeStepsAheadOfACommandDoNotHideItsDeadline) {
  Pipeline p;
  Heard h;
  p.open();
  p.expect({h.callback("ping"), nullptr, Pipeline::never, 0});
  push(p, h, "a", at(100));
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  EXPECT_EQ(p.next_deadline(), at(100));
  EXPECT_TRUE(p.current_late(at(100)));
}

TEST(Pipeline, TheNextDeadlineIsTheEarliestOfTheLinkTheQueueAndTheDrains) {
  Pipeline p;
  Heard h;
  p.open();
  push(p, h, "a", at(500));
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  time_out(p, at(400));
  p.open();
  push(p, h, "b", at(300));
  out.clear();
  ASSERT_TRUE(p.take_batch(out));
  push(p, h, "c", at(200));
  EXPECT_EQ(p.next_deadline(), at(200));
  p.take_expired(at(200));
  EXPECT_EQ(p.next_deadline(), at(300));
  fail(p.close_current(), error::connection_lost);
  EXPECT_EQ(p.next_deadline(), at(400));
}

// -- clear

TEST(Pipeline, ClearForgetsEverythingWithoutCompletingIt) {
  Pipeline p;
  Heard h;
  p.open();
  push(p, h, "a", at(100), true);
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  time_out(p, at(400));
  p.open();
  push(p, h, "b", at(100));
  const auto heard = h.log.size();
  p.clear();
  EXPECT_FALSE(p.has_work());
  EXPECT_EQ(p.current(), 0u);
  EXPECT_EQ(h.log.size(), heard);
}

// -- fail_all

TEST(Pipeline, FailAllTellsATimedOutCommandsLateHandlerAndSkipsOneWithNeither) {
  Heard h;
  Pipeline::Commands commands;
  commands.push_back({h.callback("a"), nullptr, at(1), 0});
  commands.push_back({Pipeline::Callback{}, h.late("b"), at(1), 0});  // completed already
  commands.push_back({Pipeline::Callback{}, nullptr, at(1), 0});      // nobody to tell
  Pipeline::fail_all(commands, error::connection_lost);
  const auto lost = error_code(error::connection_lost).message();
  EXPECT_EQ(h.log, (std::vector<std::string>{"a:" + lost, "b late:" + lost}));
  EXPECT_TRUE(commands.empty());
}

TEST(Pipeline, FailAllKeepsWhatACallbackAddsToTheListBeingFailed) {
  // A completion often sends the next command at once: what it adds is not failed with the
  // rest (fail_all takes the list before it calls anyone).
  Heard h;
  Pipeline::Commands commands;
  commands.push_back({[&](error_code, Reply) {
                        commands.push_back({h.callback("added"), nullptr, at(9), 0});
                      },
                      nullptr, at(1), 0});
  Pipeline::fail_all(commands, error::connection_lost);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(h.log.empty());  // the added one was not called
  EXPECT_EQ(commands.front().deadline, at(9));
}

// -- two links at once

TEST(Pipeline, EachLinkAnswersOnlyItsOwnCommandsAndIdlesOnItsOwn) {
  Pipeline p;
  Heard h;
  const auto first = p.open();
  push(p, h, "a", at(100), true);
  std::string out;
  ASSERT_TRUE(p.take_batch(out));
  time_out(p, at(2100));
  const auto second = p.open();
  push(p, h, "b", at(300));
  out.clear();
  ASSERT_TRUE(p.take_batch(out));
  // The draining link's reply idles it, not the current link.
  ASSERT_TRUE(p.pop(first, at(50)).has_value());
  EXPECT_EQ(p.idle_since(), Clock::time_point{});
  EXPECT_TRUE(p.busy(second));
  EXPECT_FALSE(p.busy(first));
  EXPECT_FALSE(p.pop(first, at(60)).has_value());  // nothing more awaited there
  ASSERT_TRUE(p.pop(second, at(70)).has_value());
  EXPECT_EQ(p.idle_since(), at(70));
}

// -- effects_of

TEST(Pipeline, APushIsNoCommandsAnswerOnlyForASubscriber) {
  Reply message;
  message.type = Reply::Type::array;
  message.elements = {text("message"), text("ch"), text("payload")};
  EXPECT_TRUE(effects_of(message, {.subscriber = true}).push);
  EXPECT_FALSE(effects_of(message, {.subscriber = false}).push);
  for (const char* kind : {"smessage", "sunsubscribe"}) {
    message.elements[0] = text(kind);
    EXPECT_TRUE(effects_of(message, {.subscriber = true}).push) << kind;
  }
  message.elements[0] = text("subscribe");  // our SUBSCRIBE's answer
  EXPECT_FALSE(effects_of(message, {.subscriber = true}).push);
  message.elements.pop_back();
  message.elements[0] = text("message");
  EXPECT_FALSE(effects_of(message, {.subscriber = true}).push);
}

TEST(Pipeline, ReadonlyFromALocatedReadyMasterMeansItWasDemoted) {
  const auto readonly = error_reply("READONLY You can't write against a read only replica.");
  EXPECT_TRUE(effects_of(readonly, {.located = true, .current_ready = true}).demoted);
  EXPECT_FALSE(effects_of(readonly, {.located = false, .current_ready = true}).demoted);
  EXPECT_FALSE(effects_of(readonly, {.located = true, .current_ready = false}).demoted);
  EXPECT_FALSE(
      effects_of(error_reply("ERR other"), {.located = true, .current_ready = true}).demoted);
  EXPECT_FALSE(effects_of(text("READONLY"), {.located = true, .current_ready = true}).demoted);
}

TEST(Pipeline, AnErrorOnALinkThatCallsTheLibraryIsCheckedForItsLoss) {
  const auto gone = error_reply("ERR Function not found");
  EXPECT_TRUE(effects_of(gone, {.current_ready = true, .functions = true}).check_functions);
  EXPECT_FALSE(effects_of(gone, {.current_ready = true, .functions = false}).check_functions);
  EXPECT_FALSE(effects_of(gone, {.current_ready = false, .functions = true}).check_functions);
  EXPECT_FALSE(effects_of(text("x"), {.current_ready = true, .functions = true}).check_functions);
}

}  // namespace

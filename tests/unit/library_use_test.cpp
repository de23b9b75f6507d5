// SPDX-License-Identifier: MIT
// How a connection calls our scripts, without a server (library_use.hpp): FCALL where the
// library answers, loading it first where it does not, EVALSHA with the scripts loaded
// ahead where it may not be loaded, and what a lost or refused library turns the link to.
// One test per row of LibraryUse's table.
#include "library_use.hpp"
#include "reply_builders.hpp"

#include <gtest/gtest.h>

using namespace redis_lock::detail;
using redis_lock::test::error_reply;
using redis_lock::test::integer;
using redis_lock::test::text;
using Step = Handshake::Step;

namespace {

const Reply probe_found = integer(1);
const Reply probe_missed = error_reply("ERR Function not found");
const Reply probe_refused =
    error_reply("NOPERM User u has no permissions to run the 'fcall' command");
const Reply loaded = text("redis_lock_0123");
const Reply already_loaded = error_reply("ERR Library 'redis_lock_0123' already exists");
const Reply load_refused =
    error_reply("NOPERM User u has no permissions to run the 'function|load' command");
const Reply load_unknown = error_reply("ERR unknown command 'FUNCTION'");

LibraryUse with_library() {
  LibraryUse use;
  use.set_library(true);
  return use;
}

/// A handshake that probes, its probe answering `probe`: what it plans once answered
/// (`can_write`: no write under way on the link).
LibraryUse::Plan probed(LibraryUse& use, const Reply& probe, bool can_write = true) {
  EXPECT_TRUE(use.start_handshake());
  use.on_handshake_reply(Step::function_probe, probe);
  return use.handshake_answered(can_write);
}

/// A handshake whose probe answers `probe`; then, when it asks to load first, the load
/// answers `load`. The plan it ends with.
LibraryUse::Plan handshake(LibraryUse& use, const Reply& probe, const Reply& load = loaded) {
  auto plan = probed(use, probe);
  if (plan.load_first) {
    use.on_handshake_reply(Step::function_load, load);
    plan = use.handshake_answered(true);
    EXPECT_FALSE(plan.load_first);  // once per handshake
  }
  return plan;
}

// -- set_library

TEST(LibraryUse, WithoutALibraryEveryCallGoesWithEvalshaAndTheHandshakeLoadsTheScripts) {
  LibraryUse use;
  use.set_library(false);
  EXPECT_FALSE(use.functions());
  EXPECT_FALSE(use.start_handshake());
  const auto plan = use.handshake_answered(true);
  EXPECT_FALSE(plan.load_first || plan.load_library || plan.load_scripts);
  EXPECT_FALSE(use.functions());
}

TEST(LibraryUse, WithALibraryCommandsQueuedBeforeTheFirstHandshakeGoWithFcall) {
  EXPECT_TRUE(with_library().functions());
}

// -- start_handshake / handshake_answered

TEST(LibraryUse, AProbeThatAnswersMeansFcallWithNothingLoaded) {
  auto use = with_library();
  const auto plan = handshake(use, probe_found);
  EXPECT_FALSE(plan.load_library || plan.load_scripts);
  EXPECT_TRUE(use.functions());
}

TEST(LibraryUse, AProbeThatMissesLoadsTheLibraryFirstThenFcall) {
  auto use = with_library();
  const auto first = probed(use, probe_missed);
  EXPECT_TRUE(first.load_first);
  use.on_handshake_reply(Step::function_load, loaded);
  const auto then = use.handshake_answered(true);
  EXPECT_FALSE(then.load_first || then.load_library || then.load_scripts);
  EXPECT_TRUE(use.functions());
}

TEST(LibraryUse, ALibraryAnotherConnectionLoadedMeanwhileCountsAsLoaded) {
  auto use = with_library();
  handshake(use, probe_missed, already_loaded);
  EXPECT_TRUE(use.functions());
}

TEST(LibraryUse, ALoadUnderAWriteStillOutGoesAheadOfTheQueueInstead) {
  auto use = with_library();
  const auto plan = probed(use, probe_missed, false);
  EXPECT_FALSE(plan.load_first);
  EXPECT_TRUE(plan.load_library);
  EXPECT_TRUE(plan.load_scripts);
  EXPECT_FALSE(use.functions());
}

TEST(LibraryUse, ALoadRefusedInTheHandshakeMeansEvalshaWithTheScriptsAheadAndNoLoadAgain) {
  for (const auto& refusal : {load_refused, load_unknown}) {
    SCOPED_TRACE(refusal.str);
    auto use = with_library();
    const auto plan = handshake(use, probe_missed, refusal);
    EXPECT_FALSE(plan.load_library);  // this handshake loaded it, and failed
    EXPECT_TRUE(plan.load_scripts);
    EXPECT_FALSE(use.functions());
    // The next handshake probes again, but never loads it again.
    const auto next = handshake(use, probe_missed);
    EXPECT_FALSE(next.load_first);
    EXPECT_FALSE(next.load_library);
    EXPECT_TRUE(next.load_scripts);
  }
}

TEST(LibraryUse, AFailedLoadThatMayBeTriedAgainIsTriedByTheNextHandshake) {
  auto use = with_library();
  const auto plan = handshake(use, probe_missed, error_reply("OOM command not allowed"));
  EXPECT_FALSE(plan.load_library);  // not twice in one handshake
  EXPECT_TRUE(plan.load_scripts);
  EXPECT_FALSE(use.functions());
  EXPECT_TRUE(probed(use, probe_missed).load_first);
}

TEST(LibraryUse, AUserRefusedFcallIsNotProbedAgainAndGoesWithEvalsha) {
  auto use = with_library();
  const auto plan = probed(use, probe_refused);
  EXPECT_FALSE(plan.load_first);  // it may not call what it would load
  EXPECT_FALSE(plan.load_library);
  EXPECT_TRUE(plan.load_scripts);
  EXPECT_FALSE(use.functions());
  // The next handshake loads the scripts itself (no probe), and nothing goes ahead.
  EXPECT_FALSE(use.start_handshake());
  const auto next = use.handshake_answered(true);
  EXPECT_FALSE(next.load_first || next.load_library || next.load_scripts);
  EXPECT_FALSE(use.functions());
}

TEST(LibraryUse, OtherHandshakeStepsSayNothingOfTheLibrary) {
  auto use = with_library();
  ASSERT_TRUE(use.start_handshake());
  use.on_handshake_reply(Step::hello, integer(1));
  use.on_handshake_reply(Step::ping, text("PONG"));
  use.on_handshake_reply(Step::function_probe, probe_found);
  use.on_handshake_reply(Step::setname, error_reply("NOPERM no setname"));
  use.on_handshake_reply(Step::script_load, error_reply("NOPERM no script|load"));
  use.handshake_answered(true);
  EXPECT_TRUE(use.functions());
  // Nothing was taken for a refusal of FCALL or FUNCTION LOAD: a miss still loads first.
  EXPECT_TRUE(probed(use, probe_missed).load_first);
}

TEST(LibraryUse, ALibraryLoadedFirstAndFlushedLaterIsLoadedAgain) {
  auto use = with_library();
  handshake(use, probe_missed, loaded);  // loaded first, in the handshake
  ASSERT_TRUE(use.functions());
  const auto plan = use.on_error("ERR Function not found");
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->load_library);  // that handshake's load does not count against it
}

// -- on_queued_load

TEST(LibraryUse, ALoadAheadOfTheQueueThatWorksTurnsTheLinkToFcall) {
  auto use = with_library();
  ASSERT_TRUE(probed(use, probe_missed, false).load_library);
  EXPECT_TRUE(use.on_queued_load(loaded, true));
  EXPECT_TRUE(use.functions());
}

TEST(LibraryUse, ALoadAnsweredAfterItsLinkWentChangesNothing) {
  auto use = with_library();
  probed(use, probe_missed, false);
  EXPECT_FALSE(use.on_queued_load(loaded, false));
  EXPECT_FALSE(use.functions());  // the next handshake asks again
}

TEST(LibraryUse, ALoadAheadOfTheQueueRefusedIsNotSentAgain) {
  auto use = with_library();
  probed(use, probe_missed, false);
  EXPECT_FALSE(use.on_queued_load(load_refused, true));
  EXPECT_FALSE(use.functions());
  const auto next = probed(use, probe_missed);
  EXPECT_FALSE(next.load_first);
  EXPECT_FALSE(next.load_library);
}

// -- on_error

TEST(LibraryUse, ALibraryFlushedUnderTheLinkTurnsItToEvalshaWithItsLoadAhead) {
  auto use = with_library();
  handshake(use, probe_found);
  const auto plan = use.on_error("ERR Function not found");
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->load_library);  // flushed, not refused: loaded again
  EXPECT_TRUE(plan->load_scripts);
  EXPECT_FALSE(use.functions());
  EXPECT_TRUE(use.on_queued_load(loaded, true));
  EXPECT_TRUE(use.functions());
}

TEST(LibraryUse, FcallRefusedLaterTurnsTheLinkToEvalshaForGood) {
  auto use = with_library();
  handshake(use, probe_found);
  const auto plan = use.on_error(probe_refused.str);
  ASSERT_TRUE(plan.has_value());
  EXPECT_FALSE(plan->load_library);
  EXPECT_TRUE(plan->load_scripts);
  EXPECT_FALSE(use.functions());
  EXPECT_FALSE(use.on_queued_load(loaded, true));  // a load answered now changes nothing
  EXPECT_FALSE(use.start_handshake());             // and it is not probed again
}

TEST(LibraryUse, AfterAFlushTheNextHandshakeProbesAndLoadsFirstAgain) {
  auto use = with_library();
  handshake(use, probe_found);
  ASSERT_TRUE(use.on_error("ERR Function not found").has_value());
  EXPECT_TRUE(probed(use, probe_missed).load_first);
}

TEST(LibraryUse, EachHandshakeStartsFromWhatItsOwnProbeFinds) {
  auto use = with_library();
  handshake(use, probe_found);
  EXPECT_TRUE(use.functions());
  // The next server (a failover, a restart without the library) answers otherwise.
  const auto plan = handshake(use, probe_missed, load_refused);
  EXPECT_FALSE(use.functions());
  EXPECT_TRUE(plan.load_scripts);
}

TEST(LibraryUse, AnErrorThatSaysNothingOfTheLibraryChangesNothing) {
  auto use = with_library();
  handshake(use, probe_found);
  EXPECT_FALSE(use.on_error("WRONGTYPE Operation against a key").has_value());
  EXPECT_FALSE(
      use.on_error("NOPERM this user has no permissions to access the 'k' key").has_value());
  EXPECT_TRUE(use.functions());
}

}  // namespace

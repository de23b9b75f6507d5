// SPDX-License-Identifier: MIT
// One idempotent request's run without a server (src/idempotency_run.hpp): every path from
// the look to the finish, as the driver would feed it.
#include "idempotency_run.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

using namespace redis_lock;
using namespace redis_lock::detail::idempotency;
using Kind = RunResult::Kind;

namespace {

constexpr std::uint64_t fence = 1'800'000'000'000'000'000ull;

RunSettings settings(bool reconcile = false, bool resend = false) {
  RunSettings s;
  s.reconcile = reconcile;
  s.resend = resend;
  s.first_look_ms = 30'000;
  s.look_cap_ms = 300'000;
  s.escalate_after_ms = 3'600'000;
  return s;
}

StoreReply reply(std::string word, State state, std::string fp = "fp", std::uint32_t attempt = 1,
                 std::int64_t began = 1'000, std::int64_t now = 2'000) {
  StoreReply r;
  r.word = std::move(word);
  r.record.state = state;
  if (state != State::none) {
    r.record.fingerprint = std::move(fp);
    r.record.attempt = attempt;
    r.record.downstream_key = downstream_key_of("k", attempt);
    r.record.fence = fence;
    r.record.began_ms = began;
  }
  if (state == State::decided) {
    r.record.status = 201;
    r.record.body = "stored";
    r.record.external_id = "ch_1";
  }
  r.now_ms = now;
  return r;
}

/// A run to its begin: looked (nothing), locked.
RunFsm begun_run(const StoreReply& begin, bool reconcile = false, Step* step = nullptr,
                 bool resend = false) {
  RunFsm fsm("k", reconcile ? "" : "fp", settings(reconcile, resend));
  if (!reconcile) {
    EXPECT_EQ(fsm.start().step, Step::look);
    EXPECT_EQ(fsm.looked({}, reply("look", State::none)).step, Step::lock);
  } else {
    EXPECT_EQ(fsm.start().step, Step::lock);
  }
  EXPECT_EQ(fsm.locked({}, true, fence).step, Step::begin);
  const auto a = fsm.begun({}, begin);
  if (step) *step = a.step;
  return fsm;
}

StoredResponse charged() { return StoredResponse{201, "charged", "ch_9"}; }

}  // namespace

TEST(IdempotencyRun, ADecidedKeyIsReplayedFromTheLookWithoutTheLock) {
  RunFsm fsm("k", "fp", settings());
  ASSERT_EQ(fsm.start().step, Step::look);
  EXPECT_EQ(fsm.looked({}, reply("look", State::decided)).step, Step::finish);
  EXPECT_FALSE(fsm.holding());
  EXPECT_EQ(fsm.result().kind, Kind::replayed);
  EXPECT_EQ(fsm.result().response, (StoredResponse{201, "stored", "ch_1"}));
  EXPECT_EQ(fsm.result().downstream_key, "k/1");
}

TEST(IdempotencyRun, TheLookAnswersAMismatchOrAnEscalationWithoutTheLock) {
  for (const State s : {State::running, State::void_, State::decided, State::escalated}) {
    RunFsm fsm("k", "fp", settings());
    fsm.start();
    EXPECT_EQ(fsm.looked({}, reply("look", s, "other")).step, Step::finish);
    EXPECT_EQ(fsm.result().kind, Kind::mismatch) << static_cast<int>(s);
    EXPECT_TRUE(fsm.result().response.body.empty()) << "another request's response is never told";
  }
  RunFsm fsm("k", "fp", settings());
  fsm.start();
  EXPECT_EQ(fsm.looked({}, reply("look", State::escalated)).step, Step::finish);
  EXPECT_EQ(fsm.result().kind, Kind::escalated);
}

TEST(IdempotencyRun, AStoreErrorBeforeTheWorkEndsTheRunWithNothingSent) {
  RunFsm looked("k", "fp", settings());
  looked.start();
  EXPECT_EQ(looked.looked(error::read_only, {}).step, Step::finish);
  EXPECT_EQ(looked.error(), error::read_only);

  RunFsm refused("k", "fp", settings());
  refused.start();
  refused.looked({}, reply("look", State::none));
  refused.locked({}, true, fence);
  EXPECT_EQ(refused.begun(error::out_of_memory, {}).step, Step::finish);
  EXPECT_EQ(refused.error(), error::out_of_memory);
  EXPECT_TRUE(refused.holding()) << "the finish releases the lock";
}

TEST(IdempotencyRun, AHeldKeyIsBusy) {
  RunFsm fsm("k", "fp", settings());
  fsm.start();
  fsm.looked({}, reply("look", State::running));
  EXPECT_EQ(fsm.locked({}, false, 0).step, Step::finish);
  EXPECT_EQ(fsm.result().kind, Kind::busy);
  EXPECT_FALSE(fsm.holding());
}

TEST(IdempotencyRun, ANewAttemptIsWorkedAndItsDecisionRecorded) {
  for (const char* word : {"created", "restarted"}) {
    Step step{};
    auto fsm = begun_run(reply(word, State::running), false, &step);
    ASSERT_EQ(step, Step::work) << word;
    EXPECT_EQ(fsm.downstream_key(), "k/1");
    EXPECT_EQ(fsm.fence(), fence);
    ASSERT_EQ(fsm.learnt(AttemptOutcome::decided(charged())).step, Step::decide);
    EXPECT_EQ(fsm.response(), charged());
    EXPECT_EQ(fsm.stored({}, reply("recorded", State::decided)).step, Step::finish);
    EXPECT_EQ(fsm.result().kind, Kind::executed);
    EXPECT_EQ(fsm.result().response, charged());
  }
}

TEST(IdempotencyRun, ADecisionRecordedBeforeIsReplayedAndAFailedRecordStillTellsTheTruth) {
  auto already = begun_run(reply("created", State::running));
  already.learnt(AttemptOutcome::decided(charged()));
  already.stored({}, reply("already", State::decided));
  EXPECT_EQ(already.result().kind, Kind::replayed);
  EXPECT_EQ(already.result().response, (StoredResponse{201, "stored", "ch_1"}));

  auto lost = begun_run(reply("created", State::running));
  lost.learnt(AttemptOutcome::decided(charged()));
  EXPECT_EQ(lost.stored(error::connection_lost, {}).step, Step::finish);
  EXPECT_FALSE(lost.error()) << "the work decided: the caller is told, a resolve records it";
  EXPECT_EQ(lost.result().kind, Kind::executed);
  EXPECT_EQ(lost.result().response, charged());
  EXPECT_FALSE(lost.result().recorded);
  EXPECT_TRUE(already.result().recorded);
}

TEST(IdempotencyRun, ABeginOrANextAttemptTooFewReplicasConfirmedIsVoidedAndNothingSent) {
  // The master began it (its reply says so), the replicas did not confirm: void, then fail.
  for (const char* word : {"created", "restarted"}) {
    RunFsm unconfirmed("k", "fp", settings());
    unconfirmed.start();
    unconfirmed.looked({}, reply("look", State::none));
    unconfirmed.locked({}, true, fence);
    EXPECT_EQ(unconfirmed.begun(error::not_replicated, reply(word, State::running, "fp", 2)).step,
              Step::void_)
        << word;
    EXPECT_EQ(unconfirmed.downstream_key(), "k/2");
    EXPECT_EQ(unconfirmed.stored(error::not_replicated, reply("done", State::void_)).step,
              Step::finish);
    EXPECT_EQ(unconfirmed.error(), error::not_replicated);
    EXPECT_TRUE(unconfirmed.holding()) << "the finish releases the lock";
  }
  // A resumed attempt may have been sent by an earlier holder: never voided on this ground.
  RunFsm resumed("k", "fp", settings());
  resumed.start();
  resumed.looked({}, reply("look", State::none));
  resumed.locked({}, true, fence);
  EXPECT_EQ(resumed.begun(error::not_replicated, reply("resumed", State::running)).step,
            Step::finish);
  EXPECT_EQ(resumed.error(), error::not_replicated);
  // The next attempt under a new key, unconfirmed: voided, not sent.
  auto next = begun_run(reply("resumed", State::running));
  ASSERT_EQ(next.learnt(AttemptOutcome::key_spent()).step, Step::next);
  EXPECT_EQ(next.stored(error::not_replicated, reply("done", State::running, "fp", 2)).step,
            Step::void_);
  EXPECT_EQ(next.stored({}, reply("done", State::void_, "fp", 2)).step, Step::finish);
  EXPECT_EQ(next.error(), error::not_replicated);
}

TEST(IdempotencyRun, AWorkThatDidNotHappenVoidsItsAttempt) {
  auto fsm = begun_run(reply("created", State::running));
  EXPECT_EQ(fsm.learnt(AttemptOutcome::not_executed()).step, Step::void_);
  EXPECT_EQ(fsm.stored({}, reply("done", State::void_)).step, Step::finish);
  EXPECT_EQ(fsm.result().kind, Kind::not_executed);

  auto lost = begun_run(reply("created", State::running));
  lost.learnt(AttemptOutcome::not_executed());
  lost.stored({}, reply("refused", State::running));
  EXPECT_EQ(lost.error(), error::lock_lost);
}

TEST(IdempotencyRun, AnUnknownOutcomeIsDeferredAndSaysWhenToAskAgain) {
  auto fsm = begun_run(reply("created", State::running));
  ASSERT_EQ(fsm.learnt(AttemptOutcome::unknown()).step, Step::defer);
  auto deferred = reply("done", State::running);
  deferred.now_ms = 10'000;
  deferred.extra = "40000";
  EXPECT_EQ(fsm.stored({}, deferred).step, Step::finish);
  EXPECT_EQ(fsm.result().kind, Kind::pending);
  EXPECT_EQ(fsm.result().retry_after, std::chrono::milliseconds(30'000));
  EXPECT_EQ(fsm.result().downstream_key, "k/1");
  EXPECT_EQ(fsm.result().looks, 0u);

  auto third = begun_run(reply("resumed", State::running));
  ASSERT_EQ(third.learnt(AttemptOutcome::unknown()).step, Step::defer);
  auto looked = reply("done", State::running);
  looked.record.looks = 3;
  looked.extra = "120000";
  third.stored({}, looked);
  EXPECT_EQ(third.result().looks, 3u) << "the backoff's count, for the logs and the observer";
}

TEST(IdempotencyRun, AResumedAttemptIsResolvedBeforeAnythingIsSent) {
  Step step{};
  auto fsm = begun_run(reply("resumed", State::running), false, &step);
  EXPECT_EQ(step, Step::resolve) << "never a blind resend";
  // Nothing happened under its key: it is sent again, the same attempt and key.
  EXPECT_EQ(fsm.learnt(AttemptOutcome::not_executed()).step, Step::work);
  EXPECT_EQ(fsm.downstream_key(), "k/1");
  EXPECT_EQ(fsm.learnt(AttemptOutcome::decided(charged())).step, Step::decide);

  auto decided = begun_run(reply("resumed", State::running));
  EXPECT_EQ(decided.learnt(AttemptOutcome::decided(charged())).step, Step::decide);

  auto spent = begun_run(reply("resumed", State::running));
  ASSERT_EQ(spent.learnt(AttemptOutcome::key_spent()).step, Step::next);
  EXPECT_EQ(spent.stored({}, reply("done", State::running, "fp", 2)).step, Step::work);
  EXPECT_EQ(spent.attempt(), 2u);
  EXPECT_EQ(spent.downstream_key(), "k/2");
}

TEST(IdempotencyRun, AWorksKeySpentIsResolvedNotTakenForNothingHappened) {
  auto fsm = begun_run(reply("created", State::running));
  EXPECT_EQ(fsm.learnt(AttemptOutcome::key_spent()).step, Step::resolve);
}

TEST(IdempotencyRun, AnUnknownOutcomePastTheBoundIsEscalated) {
  auto old = begun_run(reply("resumed", State::running, "fp", 1, 0, 3'600'000));
  ASSERT_EQ(old.learnt(AttemptOutcome::unknown()).step, Step::escalate);
  EXPECT_EQ(old.stored({}, reply("done", State::escalated)).step, Step::finish);
  EXPECT_EQ(old.result().kind, Kind::escalated);

  // The store's clock disagrees (its age is measured there): deferred instead.
  auto young = begun_run(reply("resumed", State::running, "fp", 1, 0, 3'600'000));
  young.learnt(AttemptOutcome::unknown());
  EXPECT_EQ(young.stored({}, reply("too_young", State::running)).step, Step::defer);

  auto fresh = begun_run(reply("resumed", State::running, "fp", 1, 0, 3'599'999));
  EXPECT_EQ(fresh.learnt(AttemptOutcome::unknown()).step, Step::defer);
}

TEST(IdempotencyRun, TheBeginsOtherAnswersFinishUnderTheLock) {
  const std::pair<const char*, Kind> told[] = {
      {"replay", Kind::replayed}, {"mismatch", Kind::mismatch}, {"escalated", Kind::escalated}};
  for (const auto& [word, kind] : told) {
    Step step{};
    auto fsm = begun_run(reply(word, State::decided), false, &step);
    EXPECT_EQ(step, Step::finish) << word;
    EXPECT_EQ(fsm.result().kind, kind) << word;
    EXPECT_TRUE(fsm.holding());
  }
  auto stale = begun_run(reply("stale", State::running));
  EXPECT_EQ(stale.error(), error::lock_lost);
}

TEST(IdempotencyRun, TheReconcilerWithoutAResendOrAPayloadResolvesButNeverSends) {
  Step step{};
  // With a resend but no payload kept: nothing to send either.
  auto unkept = begun_run(reply("resumed", State::running), true, &step, true);
  ASSERT_EQ(step, Step::resolve);
  EXPECT_EQ(unkept.learnt(AttemptOutcome::not_executed()).step, Step::void_);
  auto fsm = begun_run(reply("resumed", State::running), true, &step);
  ASSERT_EQ(step, Step::resolve);
  EXPECT_EQ(fsm.fingerprint(), "fp") << "the record's: a decision may rebuild a lost record";
  EXPECT_EQ(fsm.learnt(AttemptOutcome::not_executed()).step, Step::void_)
      << "the next request sends it";

  auto spent = begun_run(reply("resumed", State::running), true);
  ASSERT_EQ(spent.learnt(AttemptOutcome::key_spent()).step, Step::next);
  EXPECT_EQ(spent.stored({}, reply("done", State::running, "fp", 2)).step, Step::void_);
  EXPECT_EQ(spent.stored({}, reply("done", State::void_, "fp", 2)).step, Step::finish);
  EXPECT_EQ(spent.result().kind, Kind::not_executed);

  for (const char* word : {"none", "void"}) {
    auto absent = begun_run(reply(word, State::none), true, &step);
    EXPECT_EQ(step, Step::finish);
    EXPECT_EQ(absent.result().kind, Kind::absent);
  }
}

TEST(IdempotencyRun, AReconcilerWithAResendSendsWhatAResolveFoundUnsentWhenThePayloadIsKept) {
  auto kept = reply("resumed", State::running);
  kept.record.payload = "order 7: 12.50 EUR";
  Step step{};
  auto fsm = begun_run(kept, true, &step, true);
  ASSERT_EQ(step, Step::resolve);
  ASSERT_TRUE(fsm.payload().has_value());
  EXPECT_EQ(*fsm.payload(), "order 7: 12.50 EUR") << "the record's: the resend sends it";
  ASSERT_EQ(fsm.learnt(AttemptOutcome::not_executed()).step, Step::work)
      << "the same attempt, its key never used: sent now, no client retry needed";
  ASSERT_EQ(fsm.learnt(AttemptOutcome::decided(charged())).step, Step::decide);
  EXPECT_EQ(fsm.stored({}, reply("recorded", State::decided)).step, Step::finish);
  EXPECT_EQ(fsm.result().kind, Kind::executed);
  EXPECT_EQ(fsm.result().response, charged());

  // A spent key: the next attempt, under its new key, sent by the round.
  auto spent = begun_run(kept, true, nullptr, true);
  ASSERT_EQ(spent.learnt(AttemptOutcome::key_spent()).step, Step::next);
  ASSERT_EQ(spent.stored({}, reply("done", State::running, "fp", 2)).step, Step::work);
  EXPECT_EQ(spent.downstream_key(), "k/2");

  // What the resend answers is taken as a run's work's answer: unsent again is voided (for
  // the next request), unknown deferred, a key spent resolved (never a blind next).
  auto refused = begun_run(kept, true, nullptr, true);
  ASSERT_EQ(refused.learnt(AttemptOutcome::not_executed()).step, Step::work);
  ASSERT_EQ(refused.learnt(AttemptOutcome::not_executed()).step, Step::void_);
  EXPECT_EQ(refused.stored({}, reply("done", State::void_)).step, Step::finish);
  EXPECT_EQ(refused.result().kind, Kind::not_executed);
  auto unknown = begun_run(kept, true, nullptr, true);
  ASSERT_EQ(unknown.learnt(AttemptOutcome::not_executed()).step, Step::work);
  EXPECT_EQ(unknown.learnt(AttemptOutcome::unknown()).step, Step::defer);
  auto used = begun_run(kept, true, nullptr, true);
  ASSERT_EQ(used.learnt(AttemptOutcome::not_executed()).step, Step::work);
  EXPECT_EQ(used.learnt(AttemptOutcome::key_spent()).step, Step::resolve);
}

TEST(IdempotencyRun, AReconcilerToldNotToResendUnsentAttemptsSendsOnlyTheNextAfterASpentKey) {
  auto kept = reply("resumed", State::running);
  kept.record.payload = "order 7";
  auto s = settings(true, true);
  s.resend_unsent = false;
  const auto begun = [&] {
    RunFsm fsm("k", "", s);
    fsm.start();
    fsm.locked({}, true, fence);
    EXPECT_EQ(fsm.begun({}, kept).step, Step::resolve);
    return fsm;
  };
  auto unsent = begun();
  EXPECT_EQ(unsent.learnt(AttemptOutcome::not_executed()).step, Step::void_)
      << "left for the request's next call";
  auto spent = begun();
  ASSERT_EQ(spent.learnt(AttemptOutcome::key_spent()).step, Step::next);
  EXPECT_EQ(spent.stored({}, reply("done", State::running, "fp", 2)).step, Step::work);
}

TEST(IdempotencyRun, ARunKeepsItsOwnPayloadWhateverTheRecordSays) {
  RunFsm fsm("k", "fp", settings(), std::string("mine"));
  fsm.start();
  fsm.looked({}, reply("look", State::none));
  fsm.locked({}, true, fence);
  auto begun = reply("resumed", State::running);
  begun.record.payload = "stored";  // (a run's begin never carries it; not taken if it did)
  EXPECT_EQ(fsm.begun({}, begun).step, Step::resolve);
  ASSERT_TRUE(fsm.payload().has_value());
  EXPECT_EQ(*fsm.payload(), "mine");
}

TEST(IdempotencyRun, ADecisionTooFewReplicasConfirmedTellsWhatTheMasterDid) {
  auto recorded = begun_run(reply("created", State::running));
  ASSERT_EQ(recorded.learnt(AttemptOutcome::decided(charged())).step, Step::decide);
  EXPECT_EQ(recorded.stored(error::not_replicated, reply("recorded", State::decided)).step,
            Step::finish);
  EXPECT_FALSE(recorded.error()) << "the caller is told the decision";
  EXPECT_EQ(recorded.result().kind, Kind::executed);
  EXPECT_FALSE(recorded.result().recorded) << "a failover may lose it: the attempt stays unknown";

  auto already = begun_run(reply("created", State::running));
  already.learnt(AttemptOutcome::decided(charged()));
  already.stored(error::not_replicated, reply("already", State::decided));
  EXPECT_EQ(already.result().kind, Kind::replayed);
  EXPECT_EQ(already.result().response, (StoredResponse{201, "stored", "ch_1"}))
      << "the decision recorded before stands, not this one";

  auto refused = begun_run(reply("created", State::running));
  refused.learnt(AttemptOutcome::decided(charged()));
  refused.stored(error::not_replicated, reply("refused", State::running, "fp", 2));
  EXPECT_EQ(refused.result().kind, Kind::pending) << "another attempt is live";
}

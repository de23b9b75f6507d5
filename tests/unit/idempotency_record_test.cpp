// SPDX-License-Identifier: MIT
// The idempotent request's record (docs/design/idempotency.md) without a server: every state
// x event, as the store's scripts must make them.
#include "idempotency_record.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace redis_lock::detail::idempotency;

namespace {

constexpr std::uint64_t holder = 1'800'000'000'000'010;  // the fencing token that began it
constexpr std::uint64_t later = holder + 5;              // a holder after it
constexpr std::uint64_t earlier = holder - 5;            // a holder before it

Record in(State state) {
  Record r;
  if (state == State::none) return r;
  r.state = state;
  r.fingerprint = "fp";
  r.attempt = 2;
  r.downstream_key = "order-7/2";
  r.fence = holder;
  r.began_ms = 1'000;
  if (state == State::decided) {
    r.status = 201;
    r.body = "charged";
    r.external_id = "ch_1";
  }
  return r;
}

const State every_state[] = {State::none, State::running, State::void_, State::decided,
                             State::escalated};

const char* name(State s) {
  switch (s) {
    case State::none:
      return "none";
    case State::running:
      return "running";
    case State::void_:
      return "void";
    case State::decided:
      return "decided";
    case State::escalated:
      return "escalated";
  }
  return "?";
}

}  // namespace

TEST(IdempotencyRecord, DownstreamKeysAreTheKeyAndTheAttempt) {
  EXPECT_EQ(downstream_key_of("order-7", 1), "order-7/1");
  EXPECT_EQ(downstream_key_of("A-1", 12), "A-1/12");
  // A-1's keys never start with A-10's prefix, nor the other way round.
  EXPECT_NE(downstream_key_of("A-10", 1).rfind("A-1/", 0), 0u);
}

TEST(IdempotencyRecord, BeginInEveryState) {
  struct Case {
    State state;
    std::string fingerprint;
    std::uint64_t fence;
    BeginReply reply;
    State after;
  };
  const Case cases[] = {
      {State::none, "fp", holder, BeginReply::created, State::running},
      {State::none, "other", earlier, BeginReply::created, State::running},  // nothing to fence
      {State::running, "fp", later, BeginReply::resumed, State::running},
      {State::running, "fp", holder, BeginReply::resumed, State::running},  // asked again
      {State::running, "fp", earlier, BeginReply::stale, State::running},
      {State::running, "other", later, BeginReply::mismatch, State::running},
      {State::void_, "fp", later, BeginReply::restarted, State::running},
      {State::void_, "fp", earlier, BeginReply::stale, State::void_},
      {State::void_, "other", later, BeginReply::mismatch, State::void_},
      {State::decided, "fp", earlier, BeginReply::replay, State::decided},  // no fence needed
      {State::decided, "other", later, BeginReply::mismatch, State::decided},
      {State::escalated, "fp", earlier, BeginReply::escalated, State::escalated},
      {State::escalated, "other", later, BeginReply::mismatch, State::escalated},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(name(c.state)) + " begun by " + c.fingerprint + " fence " +
                 std::to_string(c.fence));
    Record r = in(c.state);
    const Record before = r;
    EXPECT_EQ(apply(r, Begin{"order-7", c.fingerprint, c.fence, 5'000}), c.reply);
    EXPECT_EQ(r.state, c.after);
    switch (c.reply) {
      case BeginReply::created:
        EXPECT_EQ(r.attempt, 1u);
        EXPECT_EQ(r.downstream_key, "order-7/1");
        EXPECT_EQ(r.fingerprint, c.fingerprint);
        EXPECT_EQ(r.fence, c.fence);
        EXPECT_EQ(r.began_ms, 5'000);
        break;
      case BeginReply::restarted:
        // The same attempt and key: nothing happened under it.
        EXPECT_EQ(r.attempt, before.attempt);
        EXPECT_EQ(r.downstream_key, before.downstream_key);
        EXPECT_EQ(r.fence, c.fence);
        EXPECT_EQ(r.began_ms, 5'000);
        break;
      case BeginReply::resumed:
        // Only the fencing token moves: the attempt keeps its age for the reconciler.
        EXPECT_EQ(r.downstream_key, before.downstream_key);
        EXPECT_EQ(r.fence, c.fence);
        EXPECT_EQ(r.began_ms, before.began_ms);
        break;
      default:
        EXPECT_EQ(r, before) << "nothing may change";
    }
  }
}

TEST(IdempotencyRecord, OnlyTheHolderOfTheRunningAttemptMovesIt) {
  // Void, Next and Escalate choose which downstream key is live: only the holder that began
  // or resumed this attempt (its fencing token, its key), and only while it runs.
  for (const State s : every_state) {
    for (const std::uint64_t fence : {holder, later, earlier}) {
      for (const std::string key : {"order-7/2", "order-7/1"}) {
        SCOPED_TRACE(std::string(name(s)) + " fence " + std::to_string(fence) + " key " + key);
        const bool owner = s == State::running && fence == holder && key == "order-7/2";
        {
          Record r = in(s);
          const Record before = r;
          EXPECT_EQ(apply(r, Void{key, fence}), owner ? GuardedReply::done : GuardedReply::refused);
          if (owner) {
            EXPECT_EQ(r.state, State::void_);
            EXPECT_EQ(r.downstream_key, before.downstream_key);
          } else {
            EXPECT_EQ(r, before);
          }
        }
        {
          Record r = in(s);
          const Record before = r;
          EXPECT_EQ(apply(r, Next{"order-7", key, fence, 9'000}),
                    owner ? GuardedReply::done : GuardedReply::refused);
          if (owner) {
            EXPECT_EQ(r.state, State::running);
            EXPECT_EQ(r.attempt, 3u);
            EXPECT_EQ(r.downstream_key, "order-7/3") << "a key downstream has never seen";
            EXPECT_EQ(r.began_ms, 9'000);
          } else {
            EXPECT_EQ(r, before);
          }
        }
        {
          Record r = in(s);
          const Record before = r;
          EXPECT_EQ(apply(r, Escalate{key, fence, 9'000, 5'000}),
                    owner ? GuardedReply::done : GuardedReply::refused);
          EXPECT_EQ(r.state, owner ? State::escalated : before.state);
        }
      }
    }
  }
}

TEST(IdempotencyRecord, AnAttemptIsEscalatedOnlyPastTheBoundByTheStoresClock) {
  Record r = in(State::running);  // began at 1,000
  EXPECT_EQ(apply(r, Escalate{"order-7/2", holder, 5'999, 5'000}), GuardedReply::too_young);
  EXPECT_EQ(r.state, State::running);
  EXPECT_EQ(apply(r, Escalate{"order-7/2", holder, 6'000, 5'000}), GuardedReply::done);
  EXPECT_EQ(r.state, State::escalated);
}

TEST(IdempotencyRecord, ADecisionIsKeyedNotFencedAndFinal) {
  const Decide answer{"fp", 2, "order-7/2", 201, "charged", "ch_9"};
  for (const State s : every_state) {
    SCOPED_TRACE(name(s));
    Record r = in(s);
    const Record before = r;
    const auto reply = apply(r, answer);
    if (s == State::decided) {
      EXPECT_EQ(reply, DecideReply::already);
      EXPECT_EQ(r, before) << "a decision is final";
      continue;
    }
    // Running, void, escalated (the answer came after all) and a record the store lost.
    EXPECT_EQ(reply, DecideReply::recorded);
    EXPECT_EQ(r.state, State::decided);
    EXPECT_EQ(r.status, 201);
    EXPECT_EQ(r.body, "charged");
    EXPECT_EQ(r.external_id, "ch_9");
    EXPECT_EQ(r.downstream_key, "order-7/2");
  }
}

TEST(IdempotencyRecord, ALateAnswerFromALostLeaseCountsForItsOwnAttemptOnly) {
  // Holder A began attempt 2 and lost its lease mid-call; B resumed it (a higher token).
  Record r = in(State::running);
  ASSERT_EQ(apply(r, Begin{"order-7", "fp", later, 2'000}), BeginReply::resumed);
  // A's own moves are refused by the fencing token...
  EXPECT_EQ(apply(r, Void{"order-7/2", holder}), GuardedReply::refused);
  EXPECT_EQ(apply(r, Next{"order-7", "order-7/2", holder, 2'100}), GuardedReply::refused);
  // ...but the downstream's answer for attempt 2 is the same whoever hears it: recorded.
  Record same = r;
  EXPECT_EQ(apply(same, Decide{"fp", 2, "order-7/2", 402, "declined", "ch_2"}),
            DecideReply::recorded);
  // Had B moved on to attempt 3 (attempt 2 spent, nothing happened), A's late answer for
  // attempt 2 is refused: it never overwrites a later attempt's record.
  ASSERT_EQ(apply(r, Next{"order-7", "order-7/2", later, 2'200}), GuardedReply::done);
  const Record moved = r;
  EXPECT_EQ(apply(r, Decide{"fp", 2, "order-7/2", 201, "charged", "ch_x"}), DecideReply::refused);
  EXPECT_EQ(r, moved);
  // And A, asking to begin again with its old token, is told it is stale.
  EXPECT_EQ(apply(r, Begin{"order-7", "fp", holder, 2'300}), BeginReply::stale);
  EXPECT_EQ(r, moved);
}

TEST(IdempotencyRecord, TheReconcilerResumesOnlyARunningAttemptAndCreatesNothing) {
  struct Case {
    State state;
    std::uint64_t fence;
    ResumeReply reply;
  };
  const Case cases[] = {
      {State::none, later, ResumeReply::none},  // no record is made by looking
      {State::running, later, ResumeReply::resumed},
      {State::running, holder, ResumeReply::resumed},
      {State::running, earlier, ResumeReply::stale},
      {State::void_, later, ResumeReply::void_},
      {State::decided, earlier, ResumeReply::replay},
      {State::escalated, earlier, ResumeReply::escalated},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(name(c.state)) + " resumed with fence " + std::to_string(c.fence));
    Record r = in(c.state);
    const Record before = r;
    EXPECT_EQ(apply(r, Resume{c.fence}), c.reply);
    if (c.reply == ResumeReply::resumed) {
      Record expected = before;
      expected.fence = c.fence;  // only the holder moves
      EXPECT_EQ(r, expected);
    } else {
      EXPECT_EQ(r, before) << "nothing may change";
    }
  }
}

TEST(IdempotencyRecord, OnlyAnEscalatedRequestIsSettledOrReopenedByAnOperator) {
  for (const State s : every_state) {
    SCOPED_TRACE(name(s));
    Record settled = in(s);
    const Record before = settled;
    const auto said = apply(settled, Settle{201, "found", "ch_9"});
    Record reopened = in(s);
    const auto again = apply(reopened, Reopen{"order-7"});
    if (s != State::escalated) {
      EXPECT_EQ(said, OperatorReply::refused);
      EXPECT_EQ(again, OperatorReply::refused);
      EXPECT_EQ(settled, before);
      EXPECT_EQ(reopened, before);
      continue;
    }
    EXPECT_EQ(said, OperatorReply::done);
    EXPECT_EQ(settled.state, State::decided);
    EXPECT_EQ(settled.body, "found");
    EXPECT_EQ(settled.downstream_key, before.downstream_key);
    EXPECT_EQ(again, OperatorReply::done);
    EXPECT_EQ(reopened.state, State::void_) << "the next request sends it";
    EXPECT_EQ(reopened.attempt, before.attempt + 1);
    EXPECT_EQ(reopened.downstream_key, "order-7/3") << "a key the downstream never saw";
    // The next request restarts the new attempt under its new key.
    EXPECT_EQ(apply(reopened, Begin{"order-7", "fp", holder + 1, 9'000}), BeginReply::restarted);
    EXPECT_EQ(reopened.downstream_key, "order-7/3");
  }
}

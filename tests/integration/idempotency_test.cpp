// SPDX-License-Identifier: MIT
// IdempotentRequests against real servers: each request key's work runs once, a decided key
// is replayed without its lock, an unknown outcome is resolved before anything is sent again,
// the reconciler, the deadline inside the lease, bad input and a store that refuses.
#include "live.hpp"

#include <redis_lock/idempotency.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Kind = RunResult::Kind;
using Said = std::tuple<error_code, RunResult>;

namespace {

constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

/// A downstream that counts what it was sent, by downstream key, and answers as told.
struct Downstream {
  std::map<std::string, int> sent;
  int calls = 0;
  /// The work: records the attempt, then answers `outcome` after `delay` (on its executor).
  AttemptFunction work(asio::io_context& io, redis_lock::AttemptOutcome outcome,
                       std::chrono::milliseconds delay = 0ms) {
    return [this, &io, outcome, delay](const Attempt& a, AttemptHandler done) {
      ++calls;
      ++sent[a.downstream_key];
      auto timer = std::make_shared<asio::steady_timer>(io, delay);
      timer->async_wait([timer, done, outcome](error_code) { done(outcome); });
    };
  }
};

AttemptFunction resolve_as(redis_lock::AttemptOutcome outcome, int* asked = nullptr,
                           std::string* key = nullptr) {
  return [=](const Attempt& a, AttemptHandler done) {
    if (asked) ++*asked;
    if (key) *key = a.downstream_key;
    done(outcome);
  };
}

StoredResponse charged(std::string id = "ch_1") {
  return StoredResponse{201, "charged", std::move(id)};
}

IdempotencyOptions quick() {
  IdempotencyOptions o;
  o.unchecked_store = true;  // the shared test server is not durable
  o.lease = 5s;
  o.margin = 500ms;
  return o;
}

/// quick(), with the key's lock renewed (max_hold 20 s): a 900 ms lease, renewed every 300 ms.
IdempotencyOptions renewed() {
  auto o = quick();
  o.lease = 900ms;
  o.margin = 200ms;
  o.max_hold = 20s;
  return o;
}

}  // namespace

TEST(Idempotency, TheSameRequestTenTimesAtOnceRunsItsWorkOnce) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Downstream down;
  auto options = quick();
  options.wait = 5s;  // the duplicates wait for the first, then replay its answer
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  const auto key = unique_resource("order");
  std::vector<Said> said;
  for (int i = 0; i < 10; ++i) {
    requests.async_run(key, "fp",
                       down.work(io, redis_lock::AttemptOutcome::decided(charged()), 100ms),
                       [&](error_code ec, RunResult r) { said.emplace_back(ec, r); });
  }
  ASSERT_TRUE(run_until(io, [&] { return said.size() == 10; }));
  EXPECT_EQ(down.calls, 1);
  int executed = 0;
  for (const auto& [ec, r] : said) {
    ASSERT_FALSE(ec) << ec.message();
    executed += r.kind == Kind::executed;
    EXPECT_TRUE(r.kind == Kind::executed || r.kind == Kind::replayed) << run_result_name(r.kind);
    EXPECT_EQ(r.response, charged()) << "every caller is told the one answer";
    EXPECT_EQ(r.downstream_key, key + "/1");
  }
  EXPECT_EQ(executed, 1);
}

TEST(Idempotency, ADuplicateWithoutWaitIsBusyAndNothingRunsTwice) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Downstream down;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), quick());
  const auto key = unique_resource("order");
  std::vector<Said> said;
  for (int i = 0; i < 5; ++i) {
    requests.async_run(key, "fp",
                       down.work(io, redis_lock::AttemptOutcome::decided(charged()), 300ms),
                       [&](error_code ec, RunResult r) { said.emplace_back(ec, r); });
  }
  ASSERT_TRUE(run_until(io, [&] { return said.size() == 5; }));
  EXPECT_EQ(down.calls, 1);
  std::map<Kind, int> kinds;
  for (const auto& [ec, r] : said) {
    ASSERT_FALSE(ec) << ec.message();
    ++kinds[r.kind];
  }
  EXPECT_EQ(kinds[Kind::executed], 1);
  // A duplicate that looked after the answer was recorded replays it; one that looked
  // before found the key held.
  EXPECT_EQ(kinds[Kind::busy] + kinds[Kind::replayed], 4);
}

TEST(Idempotency, ADecidedKeyIsReplayedWithoutItsLockAndAnotherFingerprintIsAMismatch) {
  asio::io_context io;
  const auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  Downstream down;
  const auto options = quick();
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  const auto key = unique_resource("order");
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, first] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_FALSE(ec);
    EXPECT_EQ(first.kind, Kind::executed);
    // Somebody holds the key's lock for good: a replay does not need it.
    redis_command(cfg.port, {"SET", lease_key(options.lock_prefix + key), "other", "PX", "30000"});
    auto [ec2, again] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged("ch_2"))), tuple);
    EXPECT_FALSE(ec2);
    EXPECT_EQ(again.kind, Kind::replayed);
    EXPECT_EQ(again.response, charged("ch_1"));
    auto [ec3, other] = co_await requests.async_run(
        key, "another amount", down.work(io, redis_lock::AttemptOutcome::decided(charged())),
        tuple);
    EXPECT_FALSE(ec3);
    EXPECT_EQ(other.kind, Kind::mismatch);
    EXPECT_TRUE(other.response.body.empty()) << "another request's response is never told";
  }());
  EXPECT_EQ(down.calls, 1);
  redis_command(cfg.port, {"DEL", lease_key(options.lock_prefix + key)});
}

TEST(Idempotency, AnUnknownOutcomeIsResolvedBeforeAnythingIsSentAgain) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Downstream down;
  int asked = 0;
  std::string asked_about;
  IdempotentRequests requests(
      locks, resolve_as(redis_lock::AttemptOutcome::decided(charged()), &asked, &asked_about),
      quick());
  const auto key = unique_resource("order");
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, first] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_FALSE(ec);
    EXPECT_EQ(first.kind, Kind::pending);
    EXPECT_GT(first.retry_after, 0ms);
    EXPECT_EQ(asked, 0);
    auto [ec2, second] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged("never"))), tuple);
    EXPECT_FALSE(ec2);
    EXPECT_EQ(second.kind, Kind::executed) << run_result_name(second.kind);
    EXPECT_EQ(second.response, charged()) << "the resolve's answer, not a second send";
  }());
  EXPECT_EQ(down.calls, 1) << "never a blind resend";
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(asked_about, key + "/1");
}

TEST(Idempotency, NothingUnderTheKeySendsItAgainAndASpentKeyTheNextAttempt) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  for (const bool spent : {false, true}) {
    SCOPED_TRACE(spent ? "key spent" : "not executed");
    Downstream down;
    IdempotentRequests requests(locks,
                                resolve_as(spent ? redis_lock::AttemptOutcome::key_spent()
                                                 : redis_lock::AttemptOutcome::not_executed()),
                                quick());
    const auto key = unique_resource("order");
    run_co(io, [&]() -> asio::awaitable<void> {
      auto [ec, first] = co_await requests.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
      EXPECT_EQ(first.kind, Kind::pending);
      auto [ec2, second] = co_await requests.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
      EXPECT_FALSE(ec2);
      EXPECT_EQ(second.kind, Kind::executed);
      EXPECT_EQ(second.attempt, spent ? 2u : 1u);
      EXPECT_EQ(second.downstream_key, key + (spent ? "/2" : "/1"));
    }());
    EXPECT_EQ(down.calls, 2);
    EXPECT_EQ(down.sent[key + "/1"], spent ? 1 : 2);
  }
}

TEST(Idempotency, AWorkThatDidNotHappenIsSentAgainByTheNextRequestUnderTheSameKey) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Downstream down;
  int asked = 0;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown(), &asked),
                              quick());
  const auto key = unique_resource("order");
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, first] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::not_executed()), tuple);
    EXPECT_FALSE(ec);
    EXPECT_EQ(first.kind, Kind::not_executed);
    auto [ec2, second] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_EQ(second.kind, Kind::executed);
    EXPECT_EQ(second.downstream_key, key + "/1");
  }());
  EXPECT_EQ(asked, 0) << "a void attempt needs no lookup";
  EXPECT_EQ(down.sent[key + "/1"], 2);
}

TEST(Idempotency, AWorkPastItsDeadlineIsPendingKeepsTheKeyAndItsLateDecisionIsRecorded) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Downstream down;
  auto options = quick();
  options.lease = 3s;
  options.margin = 1s;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  // Connected and the library loaded first: the attempt below gets its whole lease.
  run_co(io, [&]() -> asio::awaitable<void> {
    co_await requests.async_run(unique_resource("warm"), "fp",
                                down.work(io, redis_lock::AttemptOutcome::not_executed()), tuple);
  }());
  const auto key = unique_resource("order");
  bool cancelled = false, answered = false, called_on_executor = false;
  std::optional<Said> said, duplicate;
  requests.async_run(
      key, "fp",
      [&](const Attempt& a, AttemptHandler done) {
        auto slot = a.cancellation;  // (a copy: the slot is a handle)
        slot.assign([&](asio::cancellation_type) { cancelled = true; });
        auto t = std::make_shared<asio::steady_timer>(io, a.deadline + 500ms);
        t->async_wait([t, done, &answered](error_code) {
          answered = true;
          done(redis_lock::AttemptOutcome::decided(charged("late")));
        });
        // Called on the attempt's executor, where its cancellation is emitted.
        const auto* strand = a.executor.target<asio::strand<asio::any_io_executor>>();
        called_on_executor = strand && strand->running_in_this_thread();
      },
      [&](error_code ec, RunResult r) {
        said.emplace(ec, r);
        EXPECT_FALSE(answered) << "told at the deadline, before the answer";
        // The attempt may still be on its way: its key stays locked until the answer.
        requests.async_run(key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                           [&](error_code ec2, RunResult r2) { duplicate.emplace(ec2, r2); });
      });
  ASSERT_TRUE(run_until(io, [&] { return said && duplicate; }));
  EXPECT_FALSE(std::get<0>(*said));
  EXPECT_EQ(std::get<1>(*said).kind, Kind::pending);
  EXPECT_TRUE(cancelled) << "the attempt's cancellation was emitted at its deadline";
  EXPECT_TRUE(called_on_executor);
  EXPECT_FALSE(std::get<0>(*duplicate));
  EXPECT_EQ(std::get<1>(*duplicate).kind, Kind::busy)
      << run_result_name(std::get<1>(*duplicate).kind);
  // The late answer is the downstream's for that attempt's key: recorded, then replayed.
  ASSERT_TRUE(run_until(io, [&] { return answered; }));
  std::optional<RunResult> replay;
  ASSERT_TRUE(run_until(io, [&] {
    if (replay && replay->kind == Kind::replayed) return true;
    replay.reset();
    requests.async_run(key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                       [&](error_code, RunResult again) { replay = again; });
    run_until(
        io, [&] { return replay.has_value(); }, 2s);
    return replay && replay->kind == Kind::replayed;
  }));
  EXPECT_EQ(replay->response, charged("late"));
  EXPECT_EQ(down.calls, 1) << "only the warm-up's work: nothing was sent again";
}

TEST(Idempotency, AFullStoreStillRecordsTheDecisionOfABegunAttempt) {
  RedisServer store_server;
  for (const bool functions : {true, false}) {
    SCOPED_TRACE(functions ? "FCALL" : "EVALSHA");
    asio::io_context io;
    LockManager locks(io.get_executor(), shared_server_config());
    ManagerOptions store_options;
    store_options.use_functions = functions;
    LockManager store(io.get_executor(), store_server.config(), store_options);
    Downstream down;
    IdempotentRequests requests(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                                quick());
    const auto key = unique_resource("order");
    run_co(io, [&]() -> asio::awaitable<void> {
      auto [ec, r] = co_await requests.async_run(
          key, "fp",
          [&](const Attempt&, AttemptHandler done) {
            ++down.calls;
            // The store fills up while the attempt is out.
            EXPECT_EQ(store_server.command({"CONFIG", "SET", "maxmemory", "1"}), "OK");
            done(redis_lock::AttemptOutcome::decided(charged()));
          },
          tuple);
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_EQ(r.kind, Kind::executed);
      // Read on the full store: the decision was recorded.
      auto [ec2, again] = co_await requests.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
      EXPECT_FALSE(ec2) << ec2.message();
      EXPECT_EQ(again.kind, Kind::replayed);
      EXPECT_EQ(again.response, charged());
      // A client that starts while the store is full: its first call checks the store's
      // shard count (a script that writes it when it is missing), and its replay works.
      LockManager fresh_store(io.get_executor(), store_server.config(), store_options);
      IdempotentRequests fresh(locks, fresh_store,
                               resolve_as(redis_lock::AttemptOutcome::unknown()), quick());
      auto [ec3, third] = co_await fresh.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
      EXPECT_FALSE(ec3) << ec3.message();
      EXPECT_EQ(third.kind, Kind::replayed);
      EXPECT_EQ(third.response, charged());
    }());
    EXPECT_EQ(down.calls, 1);
    ASSERT_EQ(store_server.command({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  }
}

TEST(Idempotency, TheReconcilerResolvesDueAttemptsAndEscalatesPastTheBound) {
  asio::io_context io;
  const auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  // A store prefix of its own: this reconciler sees only this test's attempts.
  ManagerOptions store_options;
  store_options.key_prefix = unique_resource("store") + ":";
  LockManager store(io.get_executor(), cfg, store_options);
  Downstream down;
  auto options = quick();
  options.first_look = 300ms;
  options.shards = 4;
  std::map<std::string, redis_lock::AttemptOutcome>
      truth;  // what resolve finds, per downstream key
  int asked = 0;
  IdempotentRequests requests(
      locks, store,
      [&](const Attempt& a, AttemptHandler done) {
        ++asked;
        done(truth.count(a.downstream_key) ? truth[a.downstream_key]
                                           : redis_lock::AttemptOutcome::unknown());
      },
      options);
  const auto decided = unique_resource("a"), never = unique_resource("b"),
             unknown = unique_resource("c");
  run_co(io, [&]() -> asio::awaitable<void> {
    for (const auto& key : {decided, never, unknown}) {
      auto [ec, r] = co_await requests.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
      EXPECT_EQ(r.kind, Kind::pending);
    }
    truth[decided + "/1"] = redis_lock::AttemptOutcome::decided(charged());
    truth[never + "/1"] = redis_lock::AttemptOutcome::not_executed();
    co_await sleep_for(400ms);  // past the first look
    auto [ec, report] = co_await requests.async_reconcile(asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(report.busy, 0u);
    EXPECT_EQ(report.failed, 0u);
    EXPECT_EQ(report.looked, 3u);
    EXPECT_EQ(report.decided, 1u);
    EXPECT_EQ(report.voided, 1u);
    EXPECT_EQ(report.pending, 1u);
    // Nothing is due again before its next look (twice as late: 600 ms).
    auto [ec2, quiet] = co_await requests.async_reconcile(asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec2);
    EXPECT_EQ(quiet.looked, 0u);
    auto [ec3, replay] = co_await requests.async_run(
        decided, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_EQ(replay.kind, Kind::replayed);
    EXPECT_EQ(replay.response, charged());
  }());
  EXPECT_EQ(down.calls, 3) << "the reconciler sends nothing";

  // Past the bound, the still unknown one is escalated, and every request is told so.
  options.escalate_after = 1ms;
  IdempotentRequests strict(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                            options);
  run_co(io, [&]() -> asio::awaitable<void> {
    co_await sleep_for(700ms);  // past the second look
    auto [ec, report] = co_await strict.async_reconcile(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(report.looked, 1u);
    EXPECT_EQ(report.escalated, 1u);
    auto [ec2, r] = co_await strict.async_run(
        unknown, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_EQ(r.kind, Kind::escalated);
  }());
  EXPECT_EQ(down.calls, 3);
}

TEST(Idempotency, AnOperatorSettlesOrReopensAnEscalatedRequest) {
  asio::io_context io;
  const auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  ManagerOptions store_options;
  store_options.key_prefix = unique_resource("store") + ":";
  LockManager store(io.get_executor(), cfg, store_options);
  Downstream down;
  auto options = quick();
  options.escalate_after = 1ms;  // every unknown outcome is escalated at its first look
  options.first_look = 50ms;
  options.shards = 4;
  IdempotentRequests requests(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                              options);
  const auto found = unique_resource("found"), nothing = unique_resource("nothing");
  run_co(io, [&]() -> asio::awaitable<void> {
    for (const auto& key : {found, nothing}) {
      auto [ec, r] = co_await requests.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
      EXPECT_EQ(r.kind, Kind::pending);
    }
    co_await sleep_for(100ms);
    auto [ec, report] = co_await requests.async_reconcile(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(report.escalated, 2u);
    auto [ec2, listed] = co_await requests.async_escalated(asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec2);
    EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()),
              (std::set<std::string>{found, nothing}));
    // The operator found the first one's effect, and nothing of the second's.
    auto [ec3, settled] = co_await requests.async_settle(found, charged("ch_found"),
                                                         asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(settled);
    auto [ec4, reopened] =
        co_await requests.async_reopen(nothing, asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(reopened);
    auto [ec5, again] = co_await requests.async_settle(found, charged("other"),
                                                       asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec5);
    EXPECT_FALSE(again) << "a decided request is not settled again";
    auto [ec6, none] = co_await requests.async_escalated(asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(none.empty());
    // Its next request replays the settlement; the reopened one sends its next attempt.
    auto [ec7, replay] = co_await requests.async_run(
        found, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_EQ(replay.kind, Kind::replayed);
    EXPECT_EQ(replay.response, charged("ch_found"));
    auto [ec8, sent] = co_await requests.async_run(
        nothing, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_EQ(sent.kind, Kind::executed);
    EXPECT_EQ(sent.downstream_key, nothing + "/2") << "a key the downstream never saw";
  }());
  EXPECT_EQ(down.calls, 3);
  EXPECT_EQ(down.sent[nothing + "/2"], 1);
}

TEST(Idempotency, AClientWithAnotherShardCountIsRefused) {
  asio::io_context io;
  const auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  ManagerOptions store_options;
  store_options.key_prefix = unique_resource("store") + ":";
  LockManager store(io.get_executor(), cfg, store_options);
  Downstream down;
  auto sixteen = quick();
  auto four = quick();
  four.shards = 4;
  IdempotentRequests first(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                           sixteen);
  IdempotentRequests other(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()), four);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await first.async_run(
        unique_resource("k"), "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())),
        tuple);
    EXPECT_FALSE(ec) << ec.message();
    // It would look for every record in the wrong place: refused before anything is sent.
    auto [ec2, r2] = co_await other.async_run(
        unique_resource("k"), "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())),
        tuple);
    EXPECT_EQ(ec2, error::invalid_argument);
    EXPECT_NE(other.store_problem().find("in 16 shards; this client has 4"), std::string::npos)
        << other.store_problem();
    // A reconciler's round and an operator's calls would look in the wrong places too: each
    // is refused by a client that has not run anything before.
    IdempotentRequests reconciler(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                                  four);
    auto [ec3, report] = co_await reconciler.async_reconcile(tuple);
    EXPECT_EQ(ec3, error::invalid_argument);
    EXPECT_EQ(report.looked, 0u);
    IdempotentRequests lister(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                              four);
    auto [ec4, keys] = co_await lister.async_escalated(tuple);
    EXPECT_EQ(ec4, error::invalid_argument);
    IdempotentRequests settler(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                               four);
    auto [ec5, settled] = co_await settler.async_settle(unique_resource("k"), charged(), tuple);
    EXPECT_EQ(ec5, error::invalid_argument);
    EXPECT_FALSE(settled);
  }());
  EXPECT_EQ(down.calls, 1);
}

TEST(Idempotency, BadInputIsRefusedBeforeAnythingIsSent) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Downstream down;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), quick());
  const std::pair<std::string, std::string> bad[] = {
      {"", "fp"}, {"a/b", "fp"}, {std::string(257, 'k'), "fp"}, {"k", std::string(257, 'f')}};
  int told = 0;
  for (const auto& [key, fp] : bad) {
    requests.async_run(key, fp, down.work(io, redis_lock::AttemptOutcome::unknown()),
                       [&](error_code ec, RunResult) {
                         EXPECT_EQ(ec, error::invalid_argument);
                         ++told;
                       });
  }
  requests.async_run("k", "fp", AttemptFunction{}, [&](error_code ec, RunResult) {
    EXPECT_EQ(ec, error::invalid_argument);
    ++told;
  });
  EXPECT_EQ(told, 0) << "never inside the initiating call";
  ASSERT_TRUE(run_until(io, [&] { return told == 5; }));
  EXPECT_EQ(down.calls, 0);

  IdempotencyOptions wrong = quick();
  wrong.margin = wrong.lease;
  IdempotentRequests misconfigured(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), wrong);
  std::optional<error_code> said;
  misconfigured.async_run("k", "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                          [&](error_code ec, RunResult) { said = ec; });
  ASSERT_TRUE(run_until(io, [&] { return said.has_value(); }));
  EXPECT_EQ(*said, error::invalid_argument);
}

TEST(Idempotency, AStoreThatIsNotDurableIsRefusedWithTheSettingToChange) {
  asio::io_context io;
  RedisServer loose({"--appendonly", "yes", "--appendfsync", "everysec"});
  RedisServer durable({"--appendonly", "yes", "--appendfsync", "always"});
  LockManager locks(io.get_executor(), shared_server_config());
  LockManager loose_store(io.get_executor(), loose.config());
  LockManager durable_store(io.get_executor(), durable.config());
  Downstream down;
  IdempotencyOptions checked = quick();
  checked.unchecked_store = false;
  IdempotentRequests refused(locks, loose_store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                             checked);
  IdempotentRequests accepted(locks, durable_store,
                              resolve_as(redis_lock::AttemptOutcome::unknown()), checked);
  const auto key = unique_resource("order");
  run_co(io, [&]() -> asio::awaitable<void> {
    // The start-up gate says it before any request.
    auto [checked_ec] = co_await refused.async_check_store(tuple);
    EXPECT_EQ(checked_ec, error::store_not_durable);
    EXPECT_EQ(refused.store_problem(), "appendfsync is everysec, needs always");
    // The refusal is kept a second: every call completes with it, after its initiating call
    // returned (never inside it, also with a plain callback).
    int told = 0;
    const auto count = [&](error_code e) {
      EXPECT_EQ(e, error::store_not_durable);
      ++told;
    };
    refused.async_reconcile([&](error_code e, ReconcileReport) { count(e); });
    refused.async_escalated([&](error_code e, std::vector<std::string>) { count(e); });
    refused.async_settle(key, charged(), [&](error_code e, bool) { count(e); });
    refused.async_check_store([&](error_code e) { count(e); });
    EXPECT_EQ(told, 0);
    for (int i = 0; i < 1000 && told < 4; ++i) co_await sleep_for(5ms);  // bounded: 5 s
    EXPECT_EQ(told, 4);
    auto [ec, r] = co_await refused.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_EQ(ec, error::store_not_durable);
    EXPECT_EQ(refused.store_problem(), "appendfsync is everysec, needs always");
    auto [ec2, r2] = co_await accepted.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_FALSE(ec2) << ec2.message();
    EXPECT_EQ(r2.kind, Kind::executed);
    EXPECT_EQ(accepted.store_problem(), "");
  }());
  EXPECT_EQ(down.calls, 1);
}

TEST(Idempotency, AStoreThatRefusesWritesFailsTheRunBeforeTheWork) {
  asio::io_context io;
  RedisServer store_server;
  LockManager locks(io.get_executor(), shared_server_config());
  LockManager store(io.get_executor(), store_server.config());
  Downstream down;
  IdempotentRequests requests(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                              quick());
  const auto key = unique_resource("order");
  ASSERT_EQ(store_server.command({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_EQ(ec, error::out_of_memory) << ec.message();
  }());
  EXPECT_EQ(down.calls, 0);
  ASSERT_EQ(store_server.command({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  // Nothing recorded half-way: the store holds only its shard count (every client's first
  // call writes it when it is missing, also on a full store).
  EXPECT_EQ(store_server.command({"DBSIZE"}), "1");
  EXPECT_EQ(store_server.command({"EXISTS", "lock:idem:shards"}), "1");
  // The key's lock was released: the next request runs at once.
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.kind, Kind::executed);
  }());
}

TEST(Idempotency, AReadOnlyOrUnreachableStoreFailsTheRunBeforeTheWork) {
  RedisServer master;
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  LockManager read_only(io.get_executor(), replica.config());
  ConnectionConfig nowhere;
  nowhere.port = free_port();
  nowhere.connect_timeout = 300ms;
  LockManager unreachable(io.get_executor(), nowhere);
  Downstream down;
  IdempotentRequests on_replica(locks, read_only, resolve_as(redis_lock::AttemptOutcome::unknown()),
                                quick());
  IdempotentRequests on_nothing(locks, unreachable,
                                resolve_as(redis_lock::AttemptOutcome::unknown()), quick());
  const auto key = unique_resource("order");
  run_co(io, [&]() -> asio::awaitable<void> {
    // The look is a read: a replica answers it (no record); the begin is refused.
    auto [ec, r] = co_await on_replica.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_EQ(ec, error::read_only) << ec.message();
    auto [ec2, r2] = co_await on_nothing.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_EQ(ec2, error::connect_failed) << ec2.message();
  }());
  EXPECT_EQ(down.calls, 0) << "nothing was sent";
  EXPECT_EQ(master.command({"DBSIZE"}), "0") << "nothing recorded";
  // The key's lock was released both times: it is free.
  EXPECT_EQ(redis_command(shared_server_port(), {"EXISTS", lease_key("idem:" + key)}), "0");
}

TEST(Idempotency, EachRunAndEachLookIsReportedToTheLockManagersObserver) {
  struct Seen : Observer {
    std::mutex mutex;
    std::vector<std::tuple<std::string, bool, Kind, int, int>> events;
    std::vector<std::tuple<std::string, std::uint32_t, bool>> looks;  // resource, looks, next
    void on_idempotency(const IdempotencyEvent& e) noexcept override {
      std::lock_guard lock(mutex);
      events.emplace_back(std::string(e.key), e.reconciler, e.result, e.works, e.resolves);
      looks.emplace_back(std::string(e.resource), e.looks, e.retry_after > 0ms);
    }
    std::size_t size() {
      std::lock_guard lock(mutex);
      return events.size();
    }
  };
  asio::io_context io;
  auto seen = std::make_shared<Seen>();
  ManagerOptions with_observer;
  with_observer.observer = seen;
  LockManager locks(io.get_executor(), shared_server_config(), with_observer);
  Downstream down;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::decided(charged())),
                              quick());
  const auto key = unique_resource("order");
  run_co(io, [&]() -> asio::awaitable<void> {
    co_await requests.async_run(key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                                tuple);
    co_await requests.async_run(key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                                tuple);
    co_await requests.async_run(key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                                tuple);
  }());
  ASSERT_TRUE(run_until(io, [&] { return seen->size() == 3; }));
  std::lock_guard lock(seen->mutex);
  using E = std::tuple<std::string, bool, Kind, int, int>;
  EXPECT_EQ(seen->events[0], (E{key, false, Kind::pending, 1, 0}));
  EXPECT_EQ(seen->events[1], (E{key, false, Kind::executed, 0, 1}));  // resolved
  EXPECT_EQ(seen->events[2], (E{key, false, Kind::replayed, 0, 0}));
  // Grouped as the key's lock is; a pending run says its look's count and when the next is.
  using L = std::tuple<std::string, std::uint32_t, bool>;
  EXPECT_EQ(seen->looks[0], (L{"idem:" + key, 1, true}));
  EXPECT_EQ(seen->looks[1], (L{"idem:" + key, 0, false}));
}

TEST(Idempotency, WithStoreReplicasAWriteCountsOnceTheReplicaHasIt) {
  RedisServer master({"--repl-diskless-sync-delay", "0"});  // no 5 s wait for more replicas
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  ASSERT_TRUE(wait_until_linked(replica));
  // (The master counts the replica's acknowledgements once it has put it online.)
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (master.command({"INFO", "replication"}).find("state=online") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the replica never came online";
    std::this_thread::sleep_for(10ms);  // polled: there is no signal
  }
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  LockManager store(io.get_executor(), master.config());
  auto options = quick();
  options.store_replicas = 1;
  options.store_replication_timeout = 2s;  // a busy machine's replica answers late
  auto two = options;
  two.store_replicas = 2;
  auto hurried = options;  // where no replica answers: 300 ms per write
  hurried.store_replication_timeout = 300ms;
  Downstream down;
  int asked = 0;
  IdempotentRequests too_many(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()), two);
  IdempotentRequests requests(
      locks, store, resolve_as(redis_lock::AttemptOutcome::not_executed(), &asked), options);
  IdempotentRequests paused(locks, store, resolve_as(redis_lock::AttemptOutcome::unknown()),
                            hurried);
  const auto first = unique_resource("a"), second = unique_resource("b"),
             third = unique_resource("c");
  run_co(io, [&]() -> asio::awaitable<void> {
    // More replicas asked for than the master has: refused at the check, with the count.
    auto [refused] = co_await too_many.async_check_store(tuple);
    EXPECT_EQ(refused, error::store_not_durable);
    EXPECT_EQ(too_many.store_problem(), "1 replica(s) connected, 2 asked for");
    auto [checked] = co_await requests.async_check_store(tuple);
    EXPECT_FALSE(checked) << checked.message() << ": " << requests.store_problem();
    // Confirmed by the replica: recorded, and the replica has the record.
    auto [ec, r] = co_await requests.async_run(
        first, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged())), tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.kind, Kind::executed);
    EXPECT_TRUE(r.recorded);
    // The replica stops while the work is out: the decision is the caller's, but not
    // recorded (the master has it; no replica confirmed it).
    auto [ec2, r2] = co_await paused.async_run(
        second, "fp",
        [&](const Attempt&, AttemptHandler done) {
          ++down.calls;
          replica.pause();
          done(redis_lock::AttemptOutcome::decided(charged("ch_2")));
        },
        tuple);
    EXPECT_FALSE(ec2) << ec2.message();
    EXPECT_EQ(r2.kind, Kind::executed);
    EXPECT_EQ(r2.response, charged("ch_2"));
    EXPECT_FALSE(r2.recorded);
    // Still stopped: a new key's begin is not confirmed, and nothing is sent.
    const int before = down.calls;
    auto [ec3, r3] = co_await paused.async_run(
        third, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged("ch_3"))), tuple);
    EXPECT_EQ(ec3, error::not_replicated) << ec3.message();
    EXPECT_EQ(down.calls, before);
    replica.resume();
    // Back: the attempt begun on the master alone was voided by its holder (nothing was
    // sent under it): the next request sends it at once, with no resolve.
    auto [ec4, r4] = co_await requests.async_run(
        third, "fp", down.work(io, redis_lock::AttemptOutcome::decided(charged("ch_3"))), tuple);
    EXPECT_FALSE(ec4) << ec4.message();
    EXPECT_EQ(r4.kind, Kind::executed);
    EXPECT_TRUE(r4.recorded);
    EXPECT_EQ(asked, 0);
    EXPECT_EQ(down.calls, before + 1);
  }());
  EXPECT_EQ(down.sent[third + "/1"], 1);
}

TEST(Idempotency, AWorkIsToldWhenItsAttemptBeganByTheStoresClock) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), quick());
  std::chrono::system_clock::time_point began;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await requests.async_run(
        unique_resource("order"), "fp",
        [&](const Attempt& a, AttemptHandler done) {
          began = a.began;
          done(redis_lock::AttemptOutcome::decided(charged()));
        },
        tuple);
    EXPECT_FALSE(ec) << ec.message();
  }());
  // The store is on this machine: its clock and ours agree within a second.
  const auto apart = std::chrono::system_clock::now() - began;
  EXPECT_LT(apart, 1s);
  EXPECT_GT(apart, -1s);
}

TEST(Idempotency, AContextShutDownDuringTheStoresFirstCheckFreesEveryRunAndHandler) {
  // Runs queued behind the store's first check, then the context goes away: each run, its
  // work and its handler are dropped (as Asio drops handlers), none kept alive by another.
  for (const int steps : {0, 1, 3}) {
    SCOPED_TRACE(steps);
    auto witness = std::make_shared<int>(0);
    {
      asio::io_context io;
      LockManager locks(io.get_executor(), shared_server_config());
      IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()),
                                  quick());
      for (int i = 0; i < 3; ++i) {
        requests.async_run(
            unique_resource("k"), "fp", [witness](const Attempt&, AttemptHandler) {},
            [witness](error_code, RunResult) {});
      }
      for (int i = 0; i < steps; ++i) io.run_one_for(100ms);
    }
    EXPECT_EQ(witness.use_count(), 1);
  }
}

TEST(Idempotency, AReconcilerThatSendsCarriesOutAnUnsentRequestFromItsKeptPayload) {
  asio::io_context io;
  const auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  ManagerOptions store_options;
  store_options.key_prefix = unique_resource("store") + ":";  // this test's attempts only
  LockManager store(io.get_executor(), cfg, store_options);
  Downstream down;
  auto options = quick();
  options.first_look = 300ms;
  options.shards = 2;
  std::map<std::string, redis_lock::AttemptOutcome> truth;  // what resolve finds
  IdempotentRequests requests(
      locks, store,
      [&](const Attempt& a, AttemptHandler done) {
        done(truth.count(a.downstream_key) ? truth[a.downstream_key]
                                           : redis_lock::AttemptOutcome::unknown());
      },
      options);
  std::vector<std::pair<std::string, std::string>> resent;  // downstream key, payload
  const auto unsent = unique_resource("a"), bare = unique_resource("b"),
             spent = unique_resource("c"), again = unique_resource("d");
  AttemptFunction resend = [&](const Attempt& a, AttemptHandler done) {
    resent.emplace_back(a.downstream_key, a.payload);
    if (a.key == again) return done(redis_lock::AttemptOutcome::unknown());
    done(redis_lock::AttemptOutcome::decided(charged("ch_" + a.downstream_key)));
  };
  run_co(io, [&]() -> asio::awaitable<void> {
    // Three requests whose outcome is unknown: two keep their payload, one does not.
    std::string seen_payload;
    auto [ec, r] = co_await requests.async_run(
        unsent, "fp", "pay 12.50 to acct 7",
        [&](const Attempt& a, AttemptHandler done) {
          seen_payload = a.payload;
          done(redis_lock::AttemptOutcome::unknown());
        },
        tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.kind, Kind::pending);
    EXPECT_EQ(r.looks, 1u) << "its first look found it unknown";
    EXPECT_GT(r.retry_after, 0ms);
    EXPECT_EQ(seen_payload, "pay 12.50 to acct 7") << "the work sees its own payload";
    co_await requests.async_run(bare, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()),
                                tuple);
    co_await requests.async_run(spent, "fp", "pay 3.00 to acct 9",
                                down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    co_await requests.async_run(again, "fp", "pay 1.00 to acct 1",
                                down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);

    auto [lec, kept] = co_await requests.async_lookup(unsent, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(lec) << lec.message();
    EXPECT_EQ(kept.state, RequestRecord::State::running);
    EXPECT_TRUE(kept.payload_kept);
    EXPECT_EQ(kept.attempt, 1u);
    EXPECT_EQ(kept.downstream_key, unsent + "/1");
    EXPECT_EQ(kept.looks, 1u);
    EXPECT_EQ(kept.fingerprint, "fp");
    auto [lec2, none] = co_await requests.async_lookup(unique_resource("never"),
                                                       asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(lec2);
    EXPECT_EQ(none.state, RequestRecord::State::none);

    truth[unsent + "/1"] = redis_lock::AttemptOutcome::not_executed();
    truth[bare + "/1"] = redis_lock::AttemptOutcome::not_executed();
    truth[spent + "/1"] = redis_lock::AttemptOutcome::key_spent();
    truth[again + "/1"] = redis_lock::AttemptOutcome::key_spent();
    co_await sleep_for(400ms);  // past the first look
    auto [rec, report] =
        co_await requests.async_reconcile_sending(resend, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(rec) << rec.message();
    EXPECT_EQ(report.looked, 4u);
    EXPECT_EQ(report.sent, 3u);
    EXPECT_EQ(report.decided, 2u);
    EXPECT_EQ(report.voided, 1u) << "no payload: left for its next request";
    EXPECT_EQ(report.pending, 1u);
    EXPECT_EQ(report.failed, 0u);

    // The two sent ones are decided with what the resend answered, and replayed.
    for (const auto& [key, dkey] : {std::pair{unsent, unsent + "/1"}, {spent, spent + "/2"}}) {
      auto [e, replay] = co_await requests.async_run(
          key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
      EXPECT_EQ(replay.kind, Kind::replayed) << key;
      EXPECT_EQ(replay.response.external_id, "ch_" + dkey);
      auto [le, after] = co_await requests.async_lookup(key, asio::as_tuple(asio::use_awaitable));
      EXPECT_EQ(after.state, RequestRecord::State::decided);
      EXPECT_FALSE(after.payload_kept) << "dropped with the decision";
      EXPECT_EQ(after.response.external_id, "ch_" + dkey);
      EXPECT_TRUE(after.expires_in.has_value()) << "kept for `retention`";
      EXPECT_GT(after.expires_in.value_or(0ms), std::chrono::hours(23));
    }
    auto [le3, left] = co_await requests.async_lookup(bare, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(left.state, RequestRecord::State::unsent);
    EXPECT_FALSE(left.payload_kept);
    EXPECT_FALSE(left.expires_in.has_value()) << "an undecided record never expires";
    // A new attempt after a spent key goes on counting the looks (its backoff does not start
    // again): the run's look, then the round's.
    auto [le4, next] = co_await requests.async_lookup(again, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(next.state, RequestRecord::State::running);
    EXPECT_EQ(next.attempt, 2u);
    EXPECT_EQ(next.looks, 2u);
    EXPECT_TRUE(next.payload_kept);
  }());
  using P = std::pair<std::string, std::string>;
  // (in the shards' order)
  std::sort(resent.begin(), resent.end());
  std::vector<P> expected{P{unsent + "/1", "pay 12.50 to acct 7"},
                          P{spent + "/2", "pay 3.00 to acct 9"},
                          P{again + "/2", "pay 1.00 to acct 1"}};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(resent, expected) << "each once, the spent one under its next key";
}

TEST(Idempotency, APayloadOverTheBoundOrWithNoneAllowedIsRefusedBeforeAnythingIsSent) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  auto options = quick();
  options.max_payload_bytes = 8;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  options.max_payload_bytes = 0;
  IdempotentRequests without(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  Downstream down;
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto key = unique_resource("p");
    auto [ec, r] = co_await requests.async_run(
        key, "fp", "123456789", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_EQ(ec, error::invalid_argument);
    auto [ec2, r2] = co_await without.async_run(
        key, "fp", "1", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_EQ(ec2, error::invalid_argument);
    auto [ec3, r3] = co_await requests.async_lookup("a/b", asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec3, error::invalid_argument);
    auto [ec4, seen] = co_await requests.async_lookup(key, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec4);
    EXPECT_EQ(seen.state, RequestRecord::State::none) << "nothing was begun";
  }());
  EXPECT_EQ(down.calls, 0);
}

TEST(Idempotency, WithMaxHoldTheKeysLockIsRenewedAndTheDeadlineCountsFromIt) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  auto options = quick();
  options.lease = 1s;
  options.margin = 200ms;
  options.max_hold = 4s;
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  const auto key = unique_resource("long");
  std::chrono::steady_clock::duration budget{};
  bool answered = false;
  asio::steady_timer answer(io);
  Downstream down;
  std::optional<Said> first, duplicate;
  AttemptFunction slow = [&](const Attempt& a, AttemptHandler done) {
    budget = a.deadline - std::chrono::steady_clock::now();
    // A duplicate once the lease's first ttl has passed since the lock was taken (unrenewed,
    // the key would be free by then), then the answer.
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          co_await sleep_for(1100ms);
          duplicate = co_await requests.async_run(
              key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
        },
        asio::detached);
    answer.expires_after(1800ms);
    answer.async_wait([&, done](error_code) {
      answered = true;
      done(redis_lock::AttemptOutcome::decided(charged()));
    });
  };
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        first = co_await requests.async_run(key, "fp", slow, tuple);
      },
      asio::detached);
  ASSERT_TRUE(run_until(
      io, [&] { return first && duplicate; }, 15s));
  EXPECT_GT(budget, 3s) << "max_hold less margin from the lock, not the lease's ttl";
  EXPECT_LE(budget, 3800ms);
  ASSERT_FALSE(std::get<0>(*duplicate)) << std::get<0>(*duplicate).message();
  EXPECT_EQ(std::get<1>(*duplicate).kind, Kind::busy) << "the renewed lock still held the key";
  ASSERT_FALSE(std::get<0>(*first)) << std::get<0>(*first).message();
  EXPECT_EQ(std::get<1>(*first).kind, Kind::executed);
  EXPECT_TRUE(answered);
  EXPECT_EQ(down.calls, 0);
}

TEST(Idempotency, WithMaxHoldALostRenewalEndsTheAttemptAsItsDeadlineWould) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  auto options = renewed();
  IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()), options);
  const auto key = unique_resource("lost");
  bool cancelled = false;
  std::optional<Said> said;
  const auto start = std::chrono::steady_clock::now();
  requests.async_run(
      key, "fp",
      [&](const Attempt& a, AttemptHandler done) {
        auto slot = a.cancellation;
        slot.assign([&, done](asio::cancellation_type) {
          cancelled = true;
          done(redis_lock::AttemptOutcome::unknown());
        });
        // Another party takes the key's lock away while the attempt is out: its next renewal
        // is refused.
        locks.async_force_release("idem:" + key, [](error_code, bool) {});
      },
      [&](error_code ec, RunResult r) { said.emplace(ec, r); });
  ASSERT_TRUE(run_until(
      io, [&] { return said.has_value(); }, 10s));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(std::get<0>(*said)) << std::get<0>(*said).message();
  EXPECT_EQ(std::get<1>(*said).kind, Kind::pending);
  EXPECT_TRUE(cancelled) << "the attempt's cancellation was emitted when the lease was lost";
  EXPECT_LT(took, 5s) << "at the loss, not at the deadline (max_hold less margin: 19.8 s)";
}

TEST(Idempotency, WithMaxHoldALeaseLostWhileAResolveLooksSendsNothing) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  auto options = renewed();
  const auto key = unique_resource("gone");
  bool lost_seen = false;
  IdempotentRequests requests(
      locks,
      [&](const Attempt&, AttemptHandler done) {
        // While this resolve looks, another party takes the key's lock away; the resolve
        // answers "never sent" only once the holder's renewal has been refused.
        locks.async_force_release("idem:" + key, [](error_code, bool) {});
        auto t = std::make_shared<asio::steady_timer>(io, 800ms);
        t->async_wait([t, done, &lost_seen](error_code) {
          lost_seen = true;
          done(redis_lock::AttemptOutcome::not_executed());
        });
      },
      options);
  Downstream down;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, first] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_EQ(first.kind, Kind::pending);
    auto [ec2, second] = co_await requests.async_run(
        key, "fp", down.work(io, redis_lock::AttemptOutcome::unknown()), tuple);
    EXPECT_FALSE(ec2) << ec2.message();
    EXPECT_NE(second.kind, Kind::executed);
  }());
  EXPECT_TRUE(lost_seen);
  EXPECT_EQ(down.calls, 1) << "nothing sent on a lease known lost (another holder may send)";
}

TEST(Idempotency, AContextShutDownDuringARunWithMaxHoldFreesItsRunAndHandlers) {
  // The run holds its key's renewed lock with its work out; the context goes away: the run,
  // its work and its handler are dropped, none kept by the guard's wait for a loss.
  for (const int steps : {3, 6}) {
    SCOPED_TRACE(steps);
    auto witness = std::make_shared<int>(0);
    bool asked = false;
    {
      asio::io_context io;
      LockManager locks(io.get_executor(), shared_server_config());
      auto options = quick();
      options.max_hold = 20s;
      IdempotentRequests requests(locks, resolve_as(redis_lock::AttemptOutcome::unknown()),
                                  options);
      requests.async_run(
          unique_resource("k"), "fp",
          [witness, &asked](const Attempt&, AttemptHandler) { asked = true; },
          [witness](error_code, RunResult) {});
      run_until(
          io, [&] { return asked; }, 5s);
      for (int i = 0; i < steps; ++i) io.run_one_for(50ms);
    }
    EXPECT_TRUE(asked);
    EXPECT_EQ(witness.use_count(), 1);
  }
}

// SPDX-License-Identifier: MIT
// docs/guide.md's C++ blocks, run against a live server: each test checks what the guide
// says its block does. The fragment is wrapped in a request handler that provides what it
// uses (`io`, `config`, `id`, and the handler's own replies and work, as test doubles).
#include "snippets.hpp"

#include <redis_lock/idempotency.hpp>
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace redis_lock::test;
using boost::system::error_code;

namespace {

// ---- "The shape of a locked section" -------------------------------------------------------
namespace guide_locked_section {

std::vector<std::uint64_t> work;  // do_the_work's fencing tokens
std::function<void()> while_working;

std::string unavailable(error_code ec) { return "503 " + ec.message(); }
std::string conflict() { return "409"; }
asio::awaitable<void> do_the_work(std::uint64_t fencing_token) {
  work.push_back(fencing_token);
  if (while_working) while_working();
  co_return;
}

asio::awaitable<std::string> handle(asio::io_context& io, const redis_lock::ConnectionConfig& config,
                                    std::string id) {
  //[guide_locked_section
  // Once, at startup (`config` from ConnectionConfig::from_url, after checking its result):
  redis_lock::LockManager locks(io.get_executor(), config);

  // In each request handler:
  auto [ec, guard] = co_await locks.async_acquire("order:" + id, {.ttl = 10s, .auto_renew = true},
                                                  asio::as_tuple(asio::use_awaitable));
  if (ec)     co_return unavailable(ec);   // Redis unreachable, refused, misconfigured
  if (!guard) co_return conflict();        // someone else holds it: not an error
  co_await do_the_work(guard.fencing_token());
  co_await guard.async_release(asio::use_awaitable);   // or let the destructor post it
  //]
  co_return "200";
}

}  // namespace guide_locked_section


// ---- "Idempotent requests: the checkout's flow for any service" ---------------------------
namespace guide_idempotency {

struct Order {
  std::string id;
  long amount = 0;
  std::string fingerprint() const { return std::to_string(amount); }
  /// The request's bytes, kept while it is undecided (what the reconciler's resend sends).
  std::string to_json() const { return id + " " + std::to_string(amount); }
  static Order from_json(const std::string& text) {
    const auto space = text.find(' ');
    return Order{text.substr(0, space), std::stol(text.substr(space + 1))};
  }
};

/// A payment provider that keeps each key's first answer, and counts its charges.
struct Provider {
  std::map<std::string, redis_lock::StoredResponse> kept;
  int charges = 0;
  void charge(const Order& order, const std::string& key, std::chrono::steady_clock::time_point,
              redis_lock::AttemptHandler done) {
    if (!kept.count(key)) {
      ++charges;
      kept[key] = {201, "charged " + std::to_string(order.amount), "ch_" + key};
    }
    done(redis_lock::AttemptOutcome::decided(kept[key]));
  }
  void lookup(const std::string& key, redis_lock::AttemptHandler done) {
    done(kept.count(key) ? redis_lock::AttemptOutcome::decided(kept[key])
                         : redis_lock::AttemptOutcome::not_executed());
  }
};

std::string unavailable(error_code ec) { return "503 " + ec.message(); }
std::string answer(const redis_lock::RunResult& r) {
  return std::string(redis_lock::run_result_name(r.kind)) + " " + std::to_string(r.response.status) +
         " " + r.response.body;
}

asio::awaitable<std::string> handle(asio::io_context& io, const redis_lock::ConnectionConfig& config,
                                    const redis_lock::ConnectionConfig& ledger_config,
                                    Provider& provider, std::string id, long amount) {
  // (Made here, not passed in: GCC 12 mishandles an aggregate coroutine parameter built
  // from a braced list.)
  const Order order{std::move(id), amount};
  //[guide_idempotency
  // Once, at startup: the locks, and the records' store (a durable Redis, or `locks` itself).
  redis_lock::LockManager locks(io.get_executor(), config);
  redis_lock::LockManager ledger(io.get_executor(), ledger_config);
  redis_lock::IdempotentRequests payments(
      locks, ledger, [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
        provider.lookup(a.downstream_key, std::move(done));  // what happened under this key?
      });

  // In each request handler:
  auto [ec, r] = co_await payments.async_run(
      order.id, order.fingerprint(),
      [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
        provider.charge(order, a.downstream_key, a.deadline, std::move(done));
      },
      asio::as_tuple(asio::use_awaitable));
  if (ec) co_return unavailable(ec);  // the store or the lock failed: nothing was sent
  co_return answer(r);  // executed, replayed: r.response; busy: 409; mismatch: 422;
                        // pending: 202, Retry-After: r.retry_after; not_executed: 503
  //]
}

/// A run whose charge never reached the provider (its answer lost: unknown), then a
/// reconciler's round that resends it from the kept payload. What the round reports.
asio::awaitable<std::string> resend(asio::io_context& io, redis_lock::IdempotentRequests& payments,
                                    Provider& provider, std::string id, long amount) {
  const Order order{std::move(id), amount};
  redis_lock::AttemptFunction charge = [](const redis_lock::Attempt&,
                                          redis_lock::AttemptHandler done) {
    done(redis_lock::AttemptOutcome::unknown());  // the call was lost before the provider
  };
  //[guide_idempotency_resend
  auto [ec, r] = co_await payments.async_run(order.id, order.fingerprint(), order.to_json(),
                                             charge, asio::as_tuple(asio::use_awaitable));
  //]
  co_await sleep_for(std::chrono::milliseconds(20));  // (past the first look: 1 ms)
  //[guide_idempotency_resend_round
  auto [rec, report] = co_await payments.async_reconcile_sending(
      [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
        provider.charge(Order::from_json(a.payload), a.downstream_key, a.deadline, std::move(done));
      },
      asio::as_tuple(asio::use_awaitable));
  //]
  (void)io;
  co_return std::string(redis_lock::run_result_name(r.kind)) + ", sent " +
      std::to_string(report.sent) + ", decided " + std::to_string(report.decided);
}

}  // namespace guide_idempotency

// ---- "Errors": diagnostics per operation ---------------------------------------------------
namespace guide_diagnostics {

std::vector<std::string> logged;
void log(std::string_view what, const std::string& message, std::string_view detail) {
  logged.push_back(std::string(what) + message + " (" + std::string(detail) + ")");
}

asio::awaitable<void> take(redis_lock::LockManager& locks) {
  //[guide_diagnostics
  redis_lock::Diagnostics diag;
  auto [ec, guard] = co_await locks.async_acquire(
      "order:42", {.ttl = 5s},
      redis_lock::bind_diagnostics(diag, asio::as_tuple(asio::use_awaitable)));
  if (ec) log("acquire failed: {} ({})", ec.message(), diag.message());
  //]
}

}  // namespace guide_diagnostics

class Guide : public Snippet {
 protected:
  void SetUp() override {
    Snippet::SetUp();
    guide_locked_section::work.clear();
    guide_locked_section::while_working = nullptr;
  }
  std::string handle(const redis_lock::ConnectionConfig& cfg, const std::string& id) {
    std::optional<std::string> reply;
    run_co(io, [&]() -> asio::awaitable<void> {
      reply = co_await guide_locked_section::handle(io, cfg, id);
    }());
    return reply.value_or("no reply");
  }
  asio::io_context io;
};

}  // namespace

TEST_F(Guide, LockedSectionDoesTheWorkUnderTheLease) {
  guide_locked_section::while_working = [&] {
    EXPECT_EQ(command({"EXISTS", lease_key("order:17")}), "1") << "working without the lock";
  };
  EXPECT_EQ(handle(config(), "17"), "200");
  ASSERT_EQ(guide_locked_section::work.size(), 1u);
  EXPECT_GT(guide_locked_section::work[0], 0u);
  EXPECT_EQ(command({"EXISTS", lease_key("order:17")}), "0") << "not released";
}

// "The same text is reachable from the operation that failed": the server's own words.
TEST_F(Guide, DiagnosticsCarryTheServersTextOfAFailedAcquire) {
  command({"RPUSH", lease_key("order:42"), "x"});
  guide_diagnostics::logged.clear();
  redis_lock::LockManager locks(io.get_executor(), config());
  run_co(io, guide_diagnostics::take(locks));
  ASSERT_EQ(guide_diagnostics::logged.size(), 1u);
  EXPECT_NE(guide_diagnostics::logged[0].find("(WRONGTYPE"), std::string::npos)
      << guide_diagnostics::logged[0];
}

// "someone else holds it: not an error".
TEST_F(Guide, LockedSectionAnswersConflictWhenHeldElsewhere) {
  hold_elsewhere("order:17");
  EXPECT_EQ(handle(config(), "17"), "409");
  EXPECT_TRUE(guide_locked_section::work.empty());
}

// "Redis unreachable, refused, misconfigured": an error code, not an exception.
TEST_F(Guide, LockedSectionAnswersUnavailableWhenRedisIsDown) {
  const auto down = redis_lock::ConnectionConfig::from_url(down_url()).value();
  EXPECT_EQ(handle(down, "17"),
            "503 " + make_error_code(redis_lock::error::connect_failed).message());
  EXPECT_TRUE(guide_locked_section::work.empty());
}

// "a durable Redis": the same order twice is charged once; another amount is a mismatch; a
// store that could lose a record is refused.
TEST_F(Guide, IdempotentRequestsChargeAnOrderOnce) {
  RedisServer ledger({"--appendonly", "yes", "--appendfsync", "always"});
  guide_idempotency::Provider provider;
  const auto run = [&](const redis_lock::ConnectionConfig& store, long amount) {
    std::optional<std::string> reply;
    run_co(io, [&]() -> asio::awaitable<void> {
      reply = co_await guide_idempotency::handle(io, config(), store, provider, "order-17", amount);
    }());
    return reply.value_or("no reply");
  };
  EXPECT_EQ(run(ledger.config(), 500), "executed 201 charged 500");
  EXPECT_EQ(run(ledger.config(), 500), "replayed 201 charged 500");
  EXPECT_EQ(run(ledger.config(), 700), "mismatch 0 ");
  EXPECT_EQ(provider.charges, 1);
  EXPECT_EQ(run(config(), 500),
            "503 " + make_error_code(redis_lock::error::store_not_durable).message());
  EXPECT_EQ(provider.charges, 1);
}

// "A reconciler that sends": a charge lost on its way is carried out by the reconciler, once,
// from the kept payload, with no retry from the client.
TEST_F(Guide, IdempotentRequestsResendAKeptPayload) {
  guide_idempotency::Provider provider;
  redis_lock::LockManager locks(io.get_executor(), config());
  redis_lock::ManagerOptions own;
  own.key_prefix = "guide-resend:";  // this test's records only
  redis_lock::LockManager store(io.get_executor(), config(), own);
  redis_lock::IdempotencyOptions options;
  options.unchecked_store = true;  // the shared test server is not durable
  options.first_look = std::chrono::milliseconds(1);  // due at once
  redis_lock::IdempotentRequests payments(
      locks, store,
      [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
        provider.lookup(a.downstream_key, std::move(done));
      },
      options);
  std::optional<std::string> said;
  run_co(io, [&]() -> asio::awaitable<void> {
    said = co_await guide_idempotency::resend(io, payments, provider, "order-18", 900);
  }());
  EXPECT_EQ(said.value_or("no reply"), "pending, sent 1, decided 1");
  EXPECT_EQ(provider.charges, 1);
  EXPECT_EQ(provider.kept.count("order-18/1"), 1u) << "under the attempt's own key";
}

// ---- "Semaphores: at most N at once" ------------------------------------------------------
namespace guide_semaphore {

std::vector<int> holders_seen;  // call_provider: the semaphore's holders on the server
std::function<int()> count_holders;

std::string unavailable(error_code ec) { return "503 " + ec.message(); }
std::string busy() { return "429"; }
asio::awaitable<void> call_provider() {
  holders_seen.push_back(count_holders());
  co_return;
}

asio::awaitable<std::string> handle(redis_lock::LockManager& locks) {
  //[guide_semaphore
  auto [ec, permit] = co_await locks.async_acquire_permit(
      "provider:acme", 3, {.ttl = 10s, .wait = 2s, .auto_renew = true},
      asio::as_tuple(asio::use_awaitable));
  if (ec)      co_return unavailable(ec);
  if (!permit) co_return busy();   // no permit came free within 2 s
  co_await call_provider();
  //]
  co_return "200";
}

}  // namespace guide_semaphore

// ---- "Read-write locks: many readers or one writer" ---------------------------------------
namespace guide_rwlock {

std::vector<std::string> done;  // "read <token>" / "write <token>"
asio::awaitable<void> read(std::uint64_t token) {
  done.push_back("read " + std::to_string(token));
  co_return;
}
asio::awaitable<void> write(std::uint64_t token) {
  done.push_back("write " + std::to_string(token));
  co_return;
}

//[guide_rwlock
asio::awaitable<void> read_catalog(redis_lock::LockManager& locks) {
  // Readers: any number at once, never beside the writer.
  auto reader = co_await locks.async_acquire_shared("catalog", {.ttl = 5s, .wait = 1s},
                                                    asio::use_awaitable);
  if (!reader) co_return;   // the writer kept it (or queued first) for the whole second
  co_await read(reader.fencing_token());
}

asio::awaitable<void> write_catalog(redis_lock::LockManager& locks) {
  // The writer: nobody else, reader or writer.
  auto writer = co_await locks.async_acquire_exclusive("catalog", {.ttl = 5s, .wait = 1s},
                                                       asio::use_awaitable);
  if (!writer) co_return;
  co_await write(writer.fencing_token());
}
//]

}  // namespace guide_rwlock

// ---- "Several resources at once" ----------------------------------------------------------
namespace guide_acquire_all {

std::vector<std::pair<std::uint64_t, std::uint64_t>> transfers;
std::function<void()> while_transferring;

std::string busy() { return "429"; }
asio::awaitable<void> transfer(std::uint64_t from_token, std::uint64_t to_token) {
  transfers.emplace_back(from_token, to_token);
  if (while_transferring) while_transferring();
  co_return;
}

asio::awaitable<std::string> handle(redis_lock::LockManager& locks) {
  //[guide_acquire_all
  std::vector<std::string> accounts = {"account:17", "account:42"};
  auto guards = co_await locks.async_acquire_all(accounts, {.ttl = 5s, .wait = 2s},
                                                 asio::use_awaitable);
  if (guards.empty()) co_return busy();   // nothing is held or queued anywhere
  // guards[0] owns account:17, guards[1] owns account:42
  co_await transfer(guards[0].fencing_token(), guards[1].fencing_token());
  //]
  co_return "200";
}

}  // namespace guide_acquire_all

namespace {

class GuideKinds : public Snippet {
 protected:
  void SetUp() override {
    Snippet::SetUp();
    guide_semaphore::holders_seen.clear();
    guide_semaphore::count_holders = [] {
      return std::stoi(command({"ZCARD", lease_key("provider:acme")})) - 1;
    };
    guide_rwlock::done.clear();
    guide_acquire_all::transfers.clear();
    guide_acquire_all::while_transferring = nullptr;
  }
  template <class Fn>
  std::string run(Fn fn) {
    std::optional<std::string> reply;
    run_co(
        io, [&]() -> asio::awaitable<void> { reply = co_await fn(); }(), 15s);
    return reply.value_or("no reply");
  }
  asio::io_context io;
  redis_lock::LockManager locks{io.get_executor(), config()};
};

}  // namespace

TEST_F(GuideKinds, SemaphoreCallsTheProviderWithAPermit) {
  EXPECT_EQ(run([&] { return guide_semaphore::handle(locks); }), "200");
  EXPECT_EQ(guide_semaphore::holders_seen, std::vector<int>{1});
}

// "no permit came free within 2 s": three are held elsewhere.
TEST_F(GuideKinds, SemaphoreIsBusyWhenEveryPermitIsHeld) {
  redis_lock::LockManager other(io.get_executor(), config());
  std::vector<redis_lock::LockGuard> held;
  run([&]() -> asio::awaitable<std::string> {
    for (int i = 0; i < 3; ++i) {
      held.push_back(co_await other.async_acquire_permit("provider:acme", 3, {.ttl = 30s},
                                                         asio::use_awaitable));
    }
    co_return "";
  });
  ASSERT_TRUE(held[2]);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(run([&] { return guide_semaphore::handle(locks); }), "429");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_TRUE(guide_semaphore::holders_seen.empty());
}

TEST_F(GuideKinds, ReadersAndTheWriterEachGetTheirTurn) {
  run([&]() -> asio::awaitable<std::string> {
    co_await guide_rwlock::read_catalog(locks);
    co_await guide_rwlock::write_catalog(locks);
    co_await guide_rwlock::read_catalog(locks);
    co_return "";
  });
  ASSERT_EQ(guide_rwlock::done.size(), 3u);
  EXPECT_EQ(guide_rwlock::done[0].rfind("read ", 0), 0u);
  EXPECT_EQ(guide_rwlock::done[1].rfind("write ", 0), 0u);
  EXPECT_EQ(guide_rwlock::done[2].rfind("read ", 0), 0u);
}

// "the writer kept it for the whole second": a reader does not read beside the writer.
TEST_F(GuideKinds, AReaderDoesNotReadBesideTheWriter) {
  redis_lock::LockManager other(io.get_executor(), config());
  redis_lock::LockGuard writer;
  run([&]() -> asio::awaitable<std::string> {
    writer = co_await other.async_acquire_exclusive("catalog", {.ttl = 30s}, asio::use_awaitable);
    co_await guide_rwlock::read_catalog(locks);
    co_return "";
  });
  ASSERT_TRUE(writer);
  EXPECT_TRUE(guide_rwlock::done.empty());
}

TEST_F(GuideKinds, AcquireAllTransfersUnderBothLocks) {
  guide_acquire_all::while_transferring = [&] {
    EXPECT_EQ(command({"EXISTS", lease_key("account:17"), lease_key("account:42")}), "2");
  };
  EXPECT_EQ(run([&] { return guide_acquire_all::handle(locks); }), "200");
  ASSERT_EQ(guide_acquire_all::transfers.size(), 1u);
  EXPECT_LT(guide_acquire_all::transfers[0].first, guide_acquire_all::transfers[0].second);
  EXPECT_EQ(command({"EXISTS", lease_key("account:17"), lease_key("account:42")}), "0");
}

// "nothing is held or queued anywhere": one account held elsewhere.
TEST_F(GuideKinds, AcquireAllIsBusyAndHoldsNothingWhenOneIsHeldElsewhere) {
  hold_elsewhere("account:42");
  EXPECT_EQ(run([&] { return guide_acquire_all::handle(locks); }), "429");
  EXPECT_TRUE(guide_acquire_all::transfers.empty());
  EXPECT_EQ(command({"EXISTS", lease_key("account:17")}), "0");
}

// ---- "Leader election" ----------------------------------------------------------------------
namespace guide_election {

std::vector<std::uint64_t> runs;  // the term each run of the job was fenced with
std::function<bool()> keep_going;

asio::awaitable<void> run_nightly_report(std::uint64_t term) {
  runs.push_back(term);
  co_return;
}

asio::awaitable<void> lead(redis_lock::LockManager& locks) {
  //[guide_election_campaign
  redis_lock::Election election(locks, "nightly-report");
  while (keep_going()) {
    // Waits in line with the other candidates; the guard keeps the leadership renewed.
    redis_lock::LockGuard leadership = co_await election.async_campaign(
        "10.0.0.7:8080", {.ttl = 10s, .wait = 1min}, asio::use_awaitable);
    if (!leadership) continue;  // somebody else led the whole minute
    // Work bound to lost_slot() is cancelled if the leadership is lost.
    co_await run_nightly_report(leadership.fencing_token());  // the term fences its writes
  }  // leaving the scope resigns: the next candidate leads at once
  //]
}

std::vector<std::string> seen;

asio::awaitable<void> watch(redis_lock::LockManager& locks, int changes) {
  //[guide_election_observe
  redis_lock::Election election(locks, "nightly-report");
  std::uint64_t term = 0;  // 0: the current state at once
  for (int i = 0; i < changes; ++i) {
    std::optional<redis_lock::Leader> leader =
        co_await election.async_observe(term, asio::use_awaitable);
    // After "nobody leads", the same term (1 at the start) waits for the next leader.
    term = leader ? leader->term : std::max<std::uint64_t>(term, 1);
    seen.push_back(leader ? leader->value : "(nobody)");
  }
  //]
}

}  // namespace guide_election

// ---- "Who holds it" --------------------------------------------------------------------------
namespace guide_inspect {

asio::awaitable<std::string> describe(redis_lock::LockManager& locks) {
  //[guide_inspect
  redis_lock::LockInfo info = co_await locks.async_inspect("order:42", asio::use_awaitable);
  if (!info.held) co_return "free";
  co_return info.holder + " holds it with token " + std::to_string(info.fencing_token) + ", " +
      std::to_string(info.ttl_left.count()) + " ms left, " + std::to_string(info.waiters) +
      " waiting";
  //]
}

asio::awaitable<bool> take_away(redis_lock::LockManager& locks) {
  //[guide_force_release
  bool released = co_await locks.async_force_release("order:42", asio::use_awaitable);
  //]
  co_return released;
}

}  // namespace guide_inspect

TEST_F(GuideKinds, TheCampaignLoopLeadsAndFencesEachRunWithItsTerm) {
  int rounds = 0;
  guide_election::runs.clear();
  guide_election::keep_going = [&] { return rounds++ < 2; };
  run([&]() -> asio::awaitable<std::string> {
    co_await guide_election::lead(locks);
    co_return "";
  });
  ASSERT_EQ(guide_election::runs.size(), 2u);
  EXPECT_LT(guide_election::runs[0], guide_election::runs[1]) << "a new term each time";
  EXPECT_EQ(command({"EXISTS", lease_key("election:nightly-report")}), "0") << "resigned";
}

TEST_F(GuideKinds, TheObserveLoopSeesTheLeaderComeAndGo) {
  guide_election::seen.clear();
  redis_lock::LockManager other(io.get_executor(), config());
  redis_lock::Election election(other, "nightly-report");
  bool done = false;
  asio::co_spawn(io, guide_election::watch(locks, 3), [&](std::exception_ptr) { done = true; });
  run([&]() -> asio::awaitable<std::string> {
    co_await sleep_for(100ms);  // the observer saw nobody and waits for a leader
    auto g = co_await election.async_campaign("10.0.0.9:8080", {.ttl = 5s}, asio::use_awaitable);
    co_await sleep_for(100ms);
    co_await g.async_release(asio::use_awaitable);
    co_await sleep_for(100ms);
    co_return "";
  });
  EXPECT_TRUE(done);
  EXPECT_EQ(guide_election::seen,
            (std::vector<std::string>{"(nobody)", "10.0.0.9:8080", "(nobody)"}));
}

TEST_F(GuideKinds, InspectSaysWhoHoldsItAndForceReleaseTakesItAway) {
  redis_lock::LockManager labelled(io.get_executor(), config(), {.holder_label = "web-3:4242"});
  redis_lock::LockGuard held;
  run([&]() -> asio::awaitable<std::string> {
    held = co_await labelled.async_acquire("order:42", {.ttl = 30s}, asio::use_awaitable);
    co_return "";
  });
  ASSERT_TRUE(held);
  const auto text = run([&] { return guide_inspect::describe(locks); });
  EXPECT_EQ(text.rfind("web-3:4242 holds it with token " + std::to_string(held.fencing_token()), 0),
            0u)
      << text;
  bool released = false;
  run([&]() -> asio::awaitable<std::string> {
    released = co_await guide_inspect::take_away(locks);
    co_return "";
  });
  EXPECT_TRUE(released);
  EXPECT_EQ(run([&] { return guide_inspect::describe(locks); }), "free");
}

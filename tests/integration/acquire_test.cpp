// SPDX-License-Identifier: MIT
// Taking and giving back locks on a live server: the everyday paths and every token kind.
#include "live.hpp"

#include "child_process.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>

#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

class Acquire : public ::testing::Test {
 protected:
  asio::io_context io;
  ConnectionConfig cfg = shared_server_config();
  std::string resource = unique_resource();
};

}  // namespace

TEST_F(Acquire, TakesAndReleases) {
  LockManager locks(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    EXPECT_TRUE(g.owns_lock());
    EXPECT_TRUE(static_cast<bool>(g));
    EXPECT_EQ(g.resource(), resource);
    EXPECT_EQ(g.token().size(), 32u);
    EXPECT_GT(g.fencing_token(), 0u);
    EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), g.token());
    const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, 4000);
    EXPECT_LE(pttl, 5000);
    const bool released = co_await g.async_release(asio::use_awaitable);
    EXPECT_TRUE(released);
    EXPECT_FALSE(g.owns_lock());
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
  }());
}

TEST_F(Acquire, HeldElsewhereIsAnEmptyGuardNotAnError) {
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto first = co_await a.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(first);
    auto [ec, second] =
        co_await b.async_acquire(resource, {.ttl = 5s}, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec);
    EXPECT_FALSE(second);
    const auto first_fence = first.fencing_token();  // the release empties the guard
    EXPECT_GT(first_fence, 0u);
    EXPECT_TRUE(co_await first.async_release(asio::use_awaitable));
    auto third = co_await b.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    EXPECT_TRUE(third);
    EXPECT_GT(third.fencing_token(), first_fence);
  }());
}

TEST_F(Acquire, FencingTokensStrictlyIncrease) {
  LockManager locks(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    std::uint64_t last = 0;
    for (int i = 0; i < 20; ++i) {
      auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
      CO_ASSERT_TRUE(g);
      EXPECT_GT(g.fencing_token(), last);
      last = g.fencing_token();
      co_await g.async_release(asio::use_awaitable);
    }
  }());
}

TEST_F(Acquire, WorksWithEveryCompletionToken) {
  LockManager locks(io.get_executor(), cfg);
  std::thread runner;
  // Callback.
  std::optional<std::uint64_t> fence;
  locks.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec);
    fence = g.fencing_token();
    g.async_release([](error_code, bool released) { EXPECT_TRUE(released); });
  });
  io.run_for(5s);
  ASSERT_TRUE(fence);
  EXPECT_GT(*fence, 0u);

  // deferred (the default token), launched later.
  auto op = locks.async_acquire(resource, {.ttl = 5s});
  bool deferred_done = false;
  std::move(op)([&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec);
    EXPECT_TRUE(g);
    auto rel = g.async_release();  // default token: deferred
    std::move(rel)([&](error_code ec2, bool released) {
      EXPECT_FALSE(ec2);
      EXPECT_TRUE(released);
      deferred_done = true;
    });
  });
  io.restart();
  io.run_for(5s);
  EXPECT_TRUE(deferred_done);

  // use_future, with the io_context on another thread.
  auto work = asio::make_work_guard(io);
  io.restart();
  runner = std::thread([&] { io.run_for(10s); });
  auto fut = locks.async_acquire(resource, {.ttl = 5s}, asio::use_future);
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  LockGuard g = fut.get();
  EXPECT_TRUE(g);
  auto rel = g.async_release(asio::use_future);
  ASSERT_EQ(rel.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(rel.get());
  work.reset();
  runner.join();

  // yield_context (stackful coroutine).
  bool spawned_done = false;
  io.restart();
  asio::spawn(
      io,
      [&](asio::yield_context yield) {
        LockGuard y = locks.async_acquire(resource, {.ttl = 5s}, yield);
        EXPECT_TRUE(y);
        EXPECT_TRUE(y.async_release(yield));
        spawned_done = true;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(5s);
  EXPECT_TRUE(spawned_done);
}

// The options may be left out: `async_acquire(resource, token)` and `async_acquire(resource)`
// (deferred) take the lock with the default LockOptions, a 10 s lease.
TEST_F(Acquire, WithoutOptionsTakesTheDefaults) {
  LockManager locks(io.get_executor(), cfg);
  const auto default_lease = [&] {
    const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, 9000);
    EXPECT_LE(pttl, LockOptions{}.ttl.count());
  };
  run_co(io, [&]() -> asio::awaitable<void> {
    LockGuard g = co_await locks.async_acquire(resource, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), g.token());
    default_lease();
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));

    auto op = locks.async_acquire(resource);  // deferred: nothing is sent yet
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
    LockGuard d = co_await std::move(op)(asio::use_awaitable);
    CO_ASSERT_TRUE(d);
    default_lease();
    EXPECT_TRUE(co_await d.async_release(asio::use_awaitable));

    // {} and designated initialisers still mean the options.
    LockGuard e = co_await locks.async_acquire(resource, {}, asio::use_awaitable);
    CO_ASSERT_TRUE(e);
    default_lease();
    EXPECT_TRUE(co_await e.async_release(asio::use_awaitable));
    LockGuard f = co_await locks.async_acquire(resource, {.ttl = 3s})(asio::use_awaitable);
    CO_ASSERT_TRUE(f);
    EXPECT_LE(std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)})), 3000);
    EXPECT_TRUE(co_await f.async_release(asio::use_awaitable));
  }());

  std::optional<error_code> called_back;
  locks.async_acquire(resource, [&](error_code ec, LockGuard g) {
    EXPECT_TRUE(g);
    default_lease();
    called_back = ec;
  });
  io.restart();
  io.run_for(5s);
  ASSERT_TRUE(called_back);
  EXPECT_FALSE(*called_back) << called_back->message();
}

TEST_F(Acquire, WaitTakesTheLockWhenTheHolderReleases) {
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto first = co_await a.async_acquire(resource, {.ttl = 10s}, asio::use_awaitable);
    CO_ASSERT_TRUE(first);
    asio::steady_timer t(io, 150ms);
    t.async_wait([&](error_code) { first.async_release(asio::detached); });
    const auto start = std::chrono::steady_clock::now();
    auto second = co_await b.async_acquire(resource, {.ttl = 5s, .wait = 5s}, asio::use_awaitable);
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(second);
    EXPECT_GE(waited, 140ms);
    EXPECT_LT(waited, 2s);
  }());
}

TEST_F(Acquire, WaitGivesUpAtTheDeadline) {
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto first = co_await a.async_acquire(resource, {.ttl = 10s}, asio::use_awaitable);
    CO_ASSERT_TRUE(first);
    const auto start = std::chrono::steady_clock::now();
    auto [ec, second] = co_await b.async_acquire(resource, {.ttl = 5s, .wait = 300ms},
                                                 asio::as_tuple(asio::use_awaitable));
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_FALSE(ec);
    EXPECT_FALSE(second);
    EXPECT_GE(waited, 290ms);
    EXPECT_LT(waited, 1500ms);
  }());
}

TEST_F(Acquire, ExtendMovesTheDeadline) {
  LockManager locks(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 1s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    EXPECT_TRUE(co_await g.async_extend(60s, asio::use_awaitable));
    const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, 59000);
    auto [ec, ok] = co_await g.async_extend(0ms, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::invalid_argument);
    EXPECT_FALSE(ok);
    auto [ec2, ok2] = co_await g.async_extend(-1s, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec2, error::invalid_argument);
    EXPECT_FALSE(ok2);
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
  }());
}

TEST_F(Acquire, BinarySafeResourceNames) {
  LockManager locks(io.get_executor(), cfg);
  const std::string base = unique_resource();
  const std::vector<std::string> names = {base + "\r\n*1\r\n$4\r\nPING\r\n",
                                          base + std::string("\0nul", 4),
                                          base + "{tag}",
                                          base + "}{",
                                          "{" + base,
                                          base + " spaces and \xff\xfe bytes",
                                          base + "}"};
  run_co(io, [&]() -> asio::awaitable<void> {
    std::vector<LockGuard> held;
    for (const auto& n : names) {
      auto g = co_await locks.async_acquire(n, {.ttl = 5s}, asio::use_awaitable);
      EXPECT_TRUE(g) << n;
      EXPECT_EQ(g.resource(), n);
      EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(n)})), g.token());
      held.push_back(std::move(g));
    }
    // Each name is its own lock: none of them blocked another.
    for (auto& g : held) EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
    for (const auto& n : names) {
      EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(n)}), "0");
    }
  }());
}

TEST_F(Acquire, FencingCountersAreBoundedBySlots) {
  // Resources "t}0", "t}1", ... all hash to one slot (the lease key's tag is "t"), so they
  // must share one counter: Redis memory does not grow with the number of resources.
  ManagerOptions opts;
  opts.key_prefix = "bounded:" + std::to_string(std::random_device{}()) + ":";
  LockManager scoped(io.get_executor(), cfg, opts);
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        std::uint64_t last = 0;
        for (int i = 0; i < 500; ++i) {
          auto g = co_await scoped.async_acquire("t}" + std::to_string(i), {.ttl = 5s},
                                                 asio::use_awaitable);
          CO_ASSERT_TRUE(g);
          EXPECT_GT(g.fencing_token(), last);
          last = g.fencing_token();
          co_await g.async_release(asio::use_awaitable);
        }
      }(),
      60s);
  EXPECT_EQ(redis_command(cfg.port, {"EVAL", "return #redis.call('KEYS', ARGV[1])", "0",
                                     opts.key_prefix + "*"}),
            "1");
}

namespace {
void run_until_done(asio::io_context& io, const bool& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  io.restart();
  while (!done && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
}
}  // namespace

// A waiting acquire outlasts a brief outage of its server (killed, then back on the same
// port): connection failures within the wait are retried with backoff, and only when the
// wait runs out during an outage is its last error the answer.
/// An acquire with `wait` started while its server is down.
struct AcquireDuringAnOutage {
  explicit AcquireDuringAnOutage(std::chrono::milliseconds wait) {
    server.kill();
    locks.async_acquire(unique_resource(), {.ttl = 5s, .wait = wait},
                        [this](error_code ec, LockGuard g) {
                          done = true;
                          got_ec = ec;
                          got = std::move(g);
                        });
  }
  RedisServer server;
  asio::io_context io;
  LockManager locks{io.get_executor(), server.config()};
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  bool done = false;
  error_code got_ec;
  LockGuard got;
};

TEST(Outage, AWaitingAcquireOutlastsABriefOutage) {
  AcquireDuringAnOutage a(8s);
  // A refused connect fails within a millisecond: before outages were waited out, the
  // acquire completed with connect_failed long before this (its wait is 8 s).
  a.io.run_for(300ms);
  ASSERT_FALSE(a.done) << a.got_ec.message();
  a.server.restart();
  run_until_done(a.io, a.done, 10s);
  ASSERT_TRUE(a.done);
  EXPECT_FALSE(a.got_ec) << a.got_ec.message();
  EXPECT_TRUE(a.got);
}

TEST(Outage, AWaitThatRunsOutDuringAnOutageReportsTheConnectionError) {
  AcquireDuringAnOutage a(700ms);
  run_until_done(a.io, a.done, 10s);
  ASSERT_TRUE(a.done);
  EXPECT_EQ(a.got_ec, error::connect_failed) << a.got_ec.message();
  const auto took = std::chrono::steady_clock::now() - a.started;
  EXPECT_GE(took, 650ms) << "gave up before the wait ran out";
  EXPECT_LT(took, 5s);
}

#ifdef REDIS_LOCK_CLI_PATH
// The same through redis-lock: a queued --wait outlasts its server being killed and brought
// back (it ended with exit 3 at the first connection error, with most of its wait left).
TEST(Outage, TheCliWaitsOutABriefOutage) {
  RedisServer server;
  const auto resource = unique_resource();
  asio::io_context io;
  LockManager holder(io.get_executor(), server.config());
  bool done = false;
  LockGuard held;
  holder.async_acquire(resource, {.ttl = 60s}, [&](error_code, LockGuard g) {
    held = std::move(g);
    done = true;
  });
  run_until_done(io, done, 10s);
  ASSERT_TRUE(held);
  ChildProcess waiter({REDIS_LOCK_CLI_PATH, "--url",
                       "redis://127.0.0.1:" + std::to_string(server.port()), "--wait", "20s",
                       resource, "--", "sh", "-c", "echo ran"});
  // Queued behind the holder: its place is in the queue's key.
  wait_until([&] { return !server.command({"KEYS", "lock:q:*"}).empty(); }, 5s, "the CLI to queue");
  server.kill();  // the holder's lease goes with it (no persistence)
  // The outage itself: longer than a queued waiter sleeps between attempts (at most the
  // queue refresh interval, 400 ms), so its next attempt meets the dead server.
  std::this_thread::sleep_for(1500ms);
  server.restart();
  EXPECT_EQ(waiter.read_line(), "ran");
  EXPECT_EQ(waiter.wait(), 0);
}
#endif

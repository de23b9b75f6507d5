// SPDX-License-Identifier: MIT
// The renewal watchdog and lost-lock signalling against a real server: renewal keeps a lease,
// a refused renewal or a paused server makes the guard lost before anyone else can hold it,
// release racing renewals never resurrects the lease, max_hold stops a stuck holder.
#include "live.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/steady_timer.hpp>

#include <future>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

TEST(Renewal, ValidUntilFollowsTheTtl) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto before = Clock::now();
    auto g = co_await locks.async_acquire(resource, {.ttl = 10s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    EXPECT_GT(g.valid_until(), before + 9800ms);
    EXPECT_LE(g.valid_until(), Clock::now() + 10s);
    EXPECT_FALSE(g.lost());
    const auto old = g.valid_until();
    EXPECT_TRUE(co_await g.async_extend(60s, asio::use_awaitable));
    EXPECT_GT(g.valid_until(), old + 49s);
    co_await g.async_release(asio::use_awaitable);
    EXPECT_EQ(g.valid_until(), Clock::time_point{});
  }());
}

TEST(Renewal, AutoRenewKeepsTheLeaseAndStopsAtRelease) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    // Renewed every 100 ms: a renewal may run up to ~500 ms late on a loaded machine.
    auto g = co_await locks.async_acquire(
        resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 100ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    co_await sleep_for(2s);  // more than three ttls
    EXPECT_FALSE(g.lost());
    EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), g.token());
    EXPECT_GT(g.valid_until(), Clock::now());
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
  }());
  // Nothing renews a released guard, and an idle manager leaves no timer behind.
  const auto start = Clock::now();
  io.restart();
  io.run_for(5s);
  EXPECT_LT(Clock::now() - start, 200ms);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(Renewal, RefusedRenewalMakesTheGuardLost) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 600ms, .auto_renew = true},
                                          asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    // Work bound to the lost slot is cancelled when the lock goes.
    asio::steady_timer work(co_await asio::this_coro::executor, 30s);
    std::optional<error_code> work_result;
    work.async_wait(
        asio::bind_cancellation_slot(g.lost_slot(), [&](error_code ec) { work_result = ec; }));
    // Another party takes the key behind our back (as after an expiry and a new holder).
    redis_command(cfg.port, {"SET", lease_key(resource), "someone-else", "PX", "30000"});
    const auto [ec] = co_await g.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::lock_lost);
    EXPECT_TRUE(g.lost());
    co_await sleep_for(1ms);  // let the cancelled timer's handler run
    CO_ASSERT_TRUE(work_result.has_value());
    EXPECT_EQ(*work_result, asio::error::operation_aborted);
    // Lost means lost: no renewal touched the new holder's key.
    EXPECT_EQ(redis_command(cfg.port, {"GET", lease_key(resource)}), "someone-else");
    EXPECT_FALSE(co_await g.async_release(asio::use_awaitable));
  }());
}

TEST(Renewal, PausedServerIsNoticedBeforeAnyoneElseCanHoldTheLock) {
  RedisServer server;
  asio::io_context io;
  auto cfg = server.config();
  cfg.command_timeout = 5s;  // the renewal stays in flight: only the deadline can tell us
  LockManager a(io.get_executor(), cfg);
  Clock::time_point lost_at{};
  std::uint64_t a_fence = 0, b_fence = 0;
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        auto g = co_await a.async_acquire("paused", {.ttl = 1s, .auto_renew = true},
                                          asio::use_awaitable);
        CO_ASSERT_TRUE(g);
        a_fence = g.fencing_token();
        co_await sleep_for(400ms);  // at least one renewal went through
        // The lease's real expiry on the server is no earlier than this.
        const auto before_pttl = Clock::now();
        const auto pttl = std::stoll(server.command({"PTTL", lease_key("paused")}));
        CO_ASSERT_TRUE(pttl > 0);
        const auto server_expiry = before_pttl + std::chrono::milliseconds(pttl);
        server.pause();
        const auto [ec] = co_await g.async_wait_lost(asio::as_tuple(asio::use_awaitable));
        lost_at = Clock::now();
        EXPECT_EQ(ec, error::lock_lost);
        // Reported before the server could give the lock to anyone else, and on time.
        const auto ms = [](Clock::duration d) {
          return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
        };
        EXPECT_LT(lost_at, server_expiry) << "reported " << ms(lost_at - server_expiry)
                                          << " ms after the server expired the lease";
        EXPECT_LE(lost_at, g.valid_until() + 50ms)
            << "reported " << ms(lost_at - g.valid_until()) << " ms after valid_until()";
        co_await sleep_for(1500ms);  // paused for longer than the ttl
        server.resume();
      }(),
      20s);
  // After SIGCONT the lease has expired on the server; someone else takes it, later.
  LockManager b(io.get_executor(), server.config());
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        auto g = co_await b.async_acquire("paused", {.ttl = 5s, .wait = 5s}, asio::use_awaitable);
        CO_ASSERT_TRUE(g);
        b_fence = g.fencing_token();
      }(),
      20s);
  EXPECT_GT(b_fence, a_fence);
}

TEST(Renewal, ReleaseRacingRenewalsNeverResurrectsTheLease) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 20; ++i) {
      auto g = co_await locks.async_acquire(
          resource, {.ttl = 2s, .auto_renew = true, .renew_every = 1ms}, asio::use_awaitable);
      CO_ASSERT_TRUE(g);
      co_await sleep_for(std::chrono::milliseconds(i % 4));  // renewals in flight
      EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
      co_await sleep_for(5ms);  // any late renewal lands now
      EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0") << "round " << i;
    }
  }());
}

TEST(Renewal, MaxHoldStopsRenewingAStuckHolder) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto start = Clock::now();
    // Renewed every 100 ms: a renewal may run up to ~500 ms late without losing the lease
    // before max_hold; after it, the last renewal's 600 ms run out.
    auto g = co_await locks.async_acquire(
        resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 100ms, .max_hold = 600ms},
        asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    const auto [ec] = co_await g.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::lock_lost);
    const auto held = Clock::now() - start;
    EXPECT_GE(held, 600ms);
    EXPECT_LT(held, 600ms + 600ms + 500ms);  // max_hold + ttl + slack
  }());
}

TEST(Renewal, RefusedExtensionMarksAPlainGuardLost) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 10s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    redis_command(cfg.port, {"DEL", lease_key(resource)});
    EXPECT_FALSE(co_await g.async_extend(10s, asio::use_awaitable));
    EXPECT_TRUE(g.lost());
    const auto [ec] = co_await g.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::lock_lost);
  }());
}

TEST(Renewal, WaitLostEndsWithTheGuard) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  std::optional<error_code> result;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 10s, .auto_renew = true},
                                          asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    g.async_wait_lost([&](error_code ec) { result = ec; });
    co_await sleep_for(1ms);  // the wait is registered
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
    co_await sleep_for(1ms);
  }());
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, asio::error::operation_aborted);
  // An empty guard has no executor: it completes on the system executor, another thread.
  redis_lock::LockGuard empty;
  std::promise<error_code> empty_result;
  empty.async_wait_lost([&](error_code ec) { empty_result.set_value(ec); });
  auto fut = empty_result.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(fut.get(), asio::error::operation_aborted);
}

// A lease that was lost before its release (its process stood still past its validity, so
// no renewal went out) ends its wait with lock_lost, not operation_aborted: the release of
// a lease already lost does not turn the loss into a release. The caller decides from that
// code whether its work ran unprotected. The io thread is blocked from inside a handler, as
// a paused process would be; on waking it reads lost() and releases at once, before the
// watchdog's timer could mark the loss.
namespace {
struct LossCount final : Observer {
  std::atomic<int> lost{0};
  std::atomic<int> ended_lost{0};
  std::atomic<int> ended_released{0};
  void on_lost(std::string_view) noexcept override { ++lost; }
  void on_hold_end(const HoldEvent& e) noexcept override {
    ++(e.end == HoldEnd::lost ? ended_lost : ended_released);
  }
};
}  // namespace

TEST(Renewal, AWaitOnALeaseLostBeforeItsReleaseEndsWithLockLost) {
  asio::io_context io;
  auto cfg = shared_server_config();
  auto observer = std::make_shared<LossCount>();
  LockManager locks(io.get_executor(), cfg, {.observer = observer});
  const auto resource = unique_resource();
  std::optional<error_code> waited;
  bool lost_on_waking = false;
  std::optional<bool> released;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 600ms, .auto_renew = true},
                                          asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    g.async_wait_lost([&](error_code ec) { waited = ec; });
    co_await sleep_for(1ms);  // the wait is registered
    // The io thread stands still past the lease's validity and its expiry on the server.
    std::this_thread::sleep_until(g.valid_until() + 300ms);
    lost_on_waking = g.lost();
    released = co_await g.async_release(asio::use_awaitable);
    co_await sleep_for(1ms);
  }());
  EXPECT_TRUE(lost_on_waking);
  ASSERT_TRUE(released.has_value());
  EXPECT_FALSE(*released) << "the lease had expired on the server";
  ASSERT_TRUE(waited.has_value()) << "the wait did not complete";
  EXPECT_EQ(*waited, error::lock_lost) << waited->message();
  EXPECT_EQ(observer->lost.load(), 1) << "the loss is reported once";
  EXPECT_EQ(observer->ended_lost.load(), 1) << "the hold ended as lost";
  EXPECT_EQ(observer->ended_released.load(), 0);
}

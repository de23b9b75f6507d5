// SPDX-License-Identifier: MIT
// Mutual exclusion under real faults: a holder killed with SIGKILL, a stale holder whose lease
// expired, and two managers racing for one resource.
#include "live.hpp"

#include "child_process.hpp"

#include <cstdio>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(Faults, HolderKilledWithSigkillLosesTheLeaseAtItsTtl) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  ChildProcess holder({REDIS_LOCK_HOLDER_PATH, std::to_string(cfg.port), resource, "800"});
  const auto holder_fence = std::stoull("0" + holder.read_line());
  ASSERT_GT(holder_fence, 0u);
  holder.kill9();  // no destructor, no release: only the ttl frees the lease
  const auto killed_at = std::chrono::steady_clock::now();

  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, busy] =
        co_await locks.async_acquire(resource, {.ttl = 5s}, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec);
    EXPECT_FALSE(busy) << "the dead holder's lease is still live";
    auto g = co_await locks.async_acquire(resource, {.ttl = 5s, .wait = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    EXPECT_GT(g.fencing_token(), holder_fence);
    EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 3s);
    co_await g.async_release(asio::use_awaitable);
  }());
}

TEST(Faults, StaleHolderCannotTouchTheNewOwnersLease) {
  auto cfg = shared_server_config();
  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto stale = co_await a.async_acquire(resource, {.ttl = 200ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(stale);
    // B waits for the lease to lapse (A is "paused" and never renews).
    auto fresh = co_await b.async_acquire(resource, {.ttl = 10s, .wait = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(fresh);
    EXPECT_GT(fresh.fencing_token(), stale.fencing_token());
    // A wakes up and acts on its old guard.
    EXPECT_FALSE(co_await stale.async_extend(10s, asio::use_awaitable));
    EXPECT_FALSE(co_await stale.async_release(asio::use_awaitable));
    EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), fresh.token());
    const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, 9000);
    EXPECT_TRUE(co_await fresh.async_release(asio::use_awaitable));
  }());
}

TEST(Faults, TwoManagersRacingNeverBothWin) {
  auto cfg = shared_server_config();
  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  const auto resource = unique_resource();
  int a_wins = 0, b_wins = 0;
  for (int round = 0; round < 200; ++round) {
    LockGuard ga, gb;
    int done = 0;
    a.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      ga = std::move(g);
      ++done;
    });
    b.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      gb = std::move(g);
      ++done;
    });
    io.restart();
    io.run_for(5s);
    ASSERT_EQ(done, 2);
    ASSERT_NE(ga.owns_lock(), gb.owns_lock()) << "round " << round;
    (ga ? a_wins : b_wins)++;
    ga = LockGuard{};
    gb = LockGuard{};
    io.restart();
    io.run_for(5s);  // the releases
  }
  EXPECT_EQ(a_wins + b_wins, 200);
}

namespace {
/// How many sockets a program run from this process (fork + exec) receives open.
int sockets_a_child_inherits() {
  FILE* child = ::popen("ls -l /proc/self/fd | grep -c 'socket:'", "r");
  if (!child) return -1;
  int count = -1;
  if (std::fscanf(child, "%d", &count) != 1) count = -1;
  ::pclose(child);
  return count;
}
}  // namespace

TEST(Faults, ProgramsRunFromALockHolderGetNoneOfItsRedisConnections) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const int before = sockets_a_child_inherits();
  ASSERT_GE(before, 0);
  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto held =
        co_await a.async_acquire(resource, {.ttl = 5s, .auto_renew = true}, asio::use_awaitable);
    CO_ASSERT_TRUE(held);
    // b waits in the queue (its notification connection), then gives up.
    auto [ec, none] = co_await b.async_acquire(resource, {.ttl = 5s, .wait = 300ms},
                                               asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec);
    EXPECT_FALSE(none);
    // With both managers connected and a lease renewed, a program started now inherits
    // nothing of theirs (a daemon a deploy script starts would keep them open for its life).
    EXPECT_EQ(sockets_a_child_inherits(), before);
    co_await held.async_release(asio::use_awaitable);
  }());
}

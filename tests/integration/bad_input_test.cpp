// SPDX-License-Identifier: MIT
// The rows of docs/reliability.md's bad-input table that need a server: limits that are
// valid (huge and binary names, the longest ttl, an endless wait) work; the rest fail with a
// clear code and leave nothing behind.
#include "live.hpp"

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(BadInput, HugeResourceNameIsJustAName) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  const std::string huge = unique_resource() + std::string(1 << 20, 'x');  // 1 MiB
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(huge, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    EXPECT_EQ(g.resource(), huge);
    auto busy = co_await locks.async_acquire(huge, {.ttl = 5s}, asio::use_awaitable);
    EXPECT_FALSE(busy);
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
  });
}

TEST(BadInput, LongestTtlAndEndlessWaitAreAccepted) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    constexpr std::chrono::milliseconds ten_years{315'360'000'000};
    auto g = co_await locks.async_acquire(
        resource, {.ttl = ten_years, .wait = std::chrono::milliseconds::max()},
        asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    const auto pttl =
        std::stoll(redis_command(shared_server_port(), {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, ten_years.count() - 60'000);
    // One millisecond more is refused, before anything is sent.
    auto [ec, none] = co_await locks.async_acquire(resource + "2", {.ttl = ten_years + 1ms},
                                                   asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::invalid_argument);
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
  });
}

TEST(BadInput, ExtendWithABadTtlLeavesTheLeaseAlone) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    for (auto ttl :
         {0ms, -1ms, std::chrono::milliseconds::min(), std::chrono::milliseconds::max()}) {
      auto [ec, extended] = co_await g.async_extend(ttl, asio::as_tuple(asio::use_awaitable));
      EXPECT_EQ(ec, error::invalid_argument) << ttl.count();
      EXPECT_FALSE(extended);
    }
    const auto pttl =
        std::stoll(redis_command(shared_server_port(), {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, 4000);
    EXPECT_LE(pttl, 5000);
    EXPECT_TRUE(g.owns_lock());
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
  });
}

TEST(BadInput, DatabaseTheServerDoesNotHave) {
  asio::io_context io;
  auto cfg = shared_server_config();
  cfg.database = 9999;  // redis-server has 16 by default
  LockManager locks(io.get_executor(), cfg);
  const auto r = acquire_once(locks, io, unique_resource());
  EXPECT_EQ(r.ec, error::invalid_argument) << r.ec.message();
  EXPECT_FALSE(r.owned);
}

// SPDX-License-Identifier: MIT
// Sentinel: a master, a replica and three sentinels per test (real processes). The manager
// asks the sentinels for the master (with their own password), confirms it with ROLE, and
// finds the new master after SENTINEL FAILOVER and after the master is killed.
#include "live.hpp"
#include "lock_load.hpp"
#include "redis_sentinel.hpp"

#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

const RedisSentinelSet::Options passwords{.data_password = "data-pw", .sentinel_password = "sentinel-pw"};

void check_failover_load(LockLoad& load, RedisSentinelSet& set,
                         const std::vector<std::string>& resources, Clock::time_point healthy) {
  // Exclusion is not asserted: a Sentinel failover can lose leases (docs/safety.md).
  stop_and_check(load, "sentinel", false);
  SCOPED_TRACE(load.summary());
  int after = 0;
  for (const auto& r : resources) {
    for (const auto& w : load.windows[r]) after += w.from > healthy;
  }
  EXPECT_GT(after, 0) << "no lock was taken after the failover";
  // The lock commands went to the new master (a replica receives scripts' effects, not
  // EVALSHA, so these calls came from clients).
  const auto master = set.master();
  const auto stats = set.command(master, {"INFO", "commandstats"});
  EXPECT_NE(stats.find("cmdstat_evalsha:calls="), std::string::npos) << "nothing reached the new master";
  std::this_thread::sleep_for(load_options.ttl + 200ms);
  for (const auto& r : resources) EXPECT_EQ(set.command(master, {"EXISTS", lease_key(r)}), "0");
}

std::vector<std::string> resources(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(unique_resource());
  return out;
}

}  // namespace

TEST(Sentinel, LocksOnTheMasterTheSentinelsNameWithSeparatePasswords) {
  RedisSentinelSet set(passwords);
  asio::io_context io;
  auto url_config = ConnectionConfig::from_url(set.url());
  ASSERT_TRUE(url_config) << set.url();
  LockManager locks(io.get_executor(), set.config());
  LockManager from_url(io.get_executor(), *url_config);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, guard] = co_await locks.async_acquire(resource, {.ttl = 10s}, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec) << ec.message();
    CO_ASSERT_TRUE(guard.owns_lock());
    EXPECT_EQ(set.command(0, {"GET", lease_key(resource)}), guard.token());
    auto [ec2, other] = co_await from_url.async_acquire(resource, {.ttl = 10s}, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec2) << ec2.message();
    EXPECT_FALSE(other.owns_lock());
    auto [ec3, released] = co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(released);
    auto [ec4, mine] = co_await from_url.async_acquire(resource, {.ttl = 10s}, asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(mine.owns_lock());
  }());
}

TEST(Sentinel, RefusalsAreClearErrors) {
  RedisSentinelSet set(passwords);
  asio::io_context io;
  struct Case {
    const char* what;
    std::function<void(ConnectionConfig&)> change;
    error expected;
  };
  const Case cases[] = {
      {"unknown master name", [](ConnectionConfig& c) { c.sentinel_master = "nope"; },
       error::master_not_found},
      {"wrong sentinel password", [](ConnectionConfig& c) { c.sentinel_password = "wrong"; },
       error::auth_failed},
      {"data password given to the sentinels only",
       [](ConnectionConfig& c) { c.password.clear(); }, error::not_authenticated},
  };
  for (const auto& c : cases) {
    auto cfg = set.config();
    c.change(cfg);
    LockManager locks(io.get_executor(), cfg);
    const auto started = Clock::now();
    const auto outcome = acquire_once(locks, io, unique_resource());
    EXPECT_EQ(outcome.ec, c.expected) << c.what << ": " << outcome.ec.message();
    EXPECT_LT(Clock::now() - started, 2s) << c.what;
  }
}

TEST(Sentinel, OtherSentinelsAnswerWhenOneIsDown) {
  RedisSentinelSet set(passwords);
  set.sentinel(0).kill(SIGKILL);
  asio::io_context io;
  LockManager locks(io.get_executor(), set.config());
  const auto outcome = acquire_once(locks, io, unique_resource());
  EXPECT_FALSE(outcome.ec) << outcome.ec.message();
  EXPECT_TRUE(outcome.owned);
}

TEST(Sentinel, LockTrafficFollowsSentinelFailover) {
  RedisSentinelSet set(passwords);
  const auto names = resources(6);
  LockLoad load(set.config(), names, 8);
  std::this_thread::sleep_for(500ms);
  set.failover();
  const auto healthy = Clock::now();
  ASSERT_EQ(set.master(), 1u);
  std::this_thread::sleep_for(800ms);
  check_failover_load(load, set, names, healthy);
}

TEST(Sentinel, LockTrafficFollowsAKilledMaster) {
  RedisSentinelSet set(passwords);
  const auto names = resources(6);
  LockLoad load(set.config(), names, 8);
  std::this_thread::sleep_for(500ms);
  set.data(0).kill(SIGKILL);
  set.wait_new_master(0);  // down-after 2 s, then the election
  const auto healthy = Clock::now();
  std::this_thread::sleep_for(800ms);
  check_failover_load(load, set, names, healthy);
  EXPECT_TRUE(load.saw(error::connection_lost) || load.saw(error::connect_failed) ||
              load.saw(error::timeout) || load.saw(error::master_not_found));
}

TEST(Sentinel, IdleManagerLeavesNoWork) {
  RedisSentinelSet set(passwords);
  expect_idle_after_one_lock(set.config(), unique_resource());
}

// SPDX-License-Identifier: MIT
// LockOptions::min_replicas: WAIT against a real replica, and against none.
#include "live.hpp"

#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(Durability, AcquireWaitsForAReplica) {
  RedisServer master({"--repl-diskless-sync-delay", "0"});  // no 5 s wait for more replicas
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  ASSERT_TRUE(wait_until_linked(replica));
  asio::io_context io;
  LockManager locks(io.get_executor(), master.config());
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(
        "replicated", {.ttl = 10s, .min_replicas = 1, .replication_timeout = 2s},
        asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    // The replica has the lease already.
    EXPECT_EQ(without_record(replica.command({"GET", lease_key("replicated")})), g.token());
    // Ordinary acquires are not held up by the durable connection.
    auto plain = co_await locks.async_acquire("plain", {.ttl = 10s}, asio::use_awaitable);
    EXPECT_TRUE(plain);
  }());
}

TEST(Durability, TooFewReplicasReleasesAndReportsNotReplicated) {
  RedisServer lonely;
  asio::io_context io;
  LockManager locks(io.get_executor(), lonely.config());
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto start = std::chrono::steady_clock::now();
    auto [ec, g] = co_await locks.async_acquire(
        "unreplicated", {.ttl = 10s, .min_replicas = 1, .replication_timeout = 200ms},
        asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::not_replicated) << ec.message();
    EXPECT_FALSE(g);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
  }());
  io.restart();
  io.run_for(5s);  // the release posted for the unconfirmed lease
  EXPECT_EQ(lonely.command({"EXISTS", lease_key("unreplicated")}), "0");
}

TEST(Durability, NegativeReplicaCountIsInvalid) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  auto r = [&] {
    std::optional<error_code> out;
    locks.async_acquire("x", {.min_replicas = -1}, [&](error_code ec, LockGuard) { out = ec; });
    io.run_for(5s);
    return out;
  }();
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, error::invalid_argument);
}

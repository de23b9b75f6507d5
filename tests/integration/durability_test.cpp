// SPDX-License-Identifier: MIT
// LockOptions::min_replicas: WAIT against a real replica, and against none.
#include "live.hpp"

#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

namespace {

/// The renewals' events, with their error and its text (copied: the views end with the call).
struct RenewalLog final : Observer {
  std::mutex mutex;
  std::vector<std::pair<error_code, std::string>> failed;
  void on_lease(const LeaseEvent& e) noexcept override {
    if (e.command != LeaseCommand::renewal || !e.error) return;
    std::lock_guard lock(mutex);
    failed.emplace_back(e.error, std::string(e.detail));
  }
  std::optional<std::pair<error_code, std::string>> first() {
    std::lock_guard lock(mutex);
    if (failed.empty()) return std::nullopt;
    return failed.front();
  }
};

}  // namespace

// One policy for a WAIT the server answers with an error (here a user whose +wait was taken
// away): the server's error, with its text, for an acquire, an extension and a renewal alike.
// (A renewal reported it as not_replicated, without the text.)
TEST(Durability, AWaitTheServerRefusesIsItsErrorForAcquireExtendAndRenewal) {
  RedisServer master({"--repl-diskless-sync-delay", "0"});
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  ASSERT_TRUE(wait_until_linked(replica));
  ASSERT_EQ(master.command({"ACL", "SETUSER", "waiter", "on", ">pw", "~*", "&*", "+@all"}), "OK");
  auto cfg = master.config();
  cfg.username = "waiter";
  cfg.password = "pw";
  auto log = std::make_shared<RenewalLog>();
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg, {.observer = log});
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto use = asio::as_tuple(asio::use_awaitable);
    const LockOptions durable{.ttl = 10s, .min_replicas = 1, .replication_timeout = 2s};
    auto [e1, held] = co_await locks.async_acquire(unique_resource("held"), durable, use);
    CO_ASSERT_TRUE(!e1 && held);
    auto renewed_options = durable;
    renewed_options.ttl = 900ms;  // renewed every 300 ms
    renewed_options.auto_renew = true;
    auto [e2, renewed] =
        co_await locks.async_acquire(unique_resource("renewed"), renewed_options, use);
    CO_ASSERT_TRUE(!e2 && renewed);
    // (An ACL change applies at once to the user's connections, authenticated already.)
    EXPECT_EQ(master.command({"ACL", "SETUSER", "waiter", "-wait"}), "OK");

    auto [e3, extended] = co_await held.async_extend(10s, use);
    EXPECT_EQ(e3, error::no_permission) << e3.message();
    EXPECT_FALSE(extended);
    EXPECT_TRUE(locks.last_server_error().starts_with("NOPERM")) << locks.last_server_error();

    auto [e4, refused] = co_await locks.async_acquire(unique_resource("new"), durable, use);
    EXPECT_EQ(e4, error::no_permission) << e4.message();
    EXPECT_FALSE(refused);

    for (int i = 0; i < 300 && !log->first(); ++i) co_await sleep_for(10ms);
    const auto renewal = log->first();
    CO_ASSERT_TRUE(renewal.has_value());
    EXPECT_EQ(renewal->first, error::no_permission) << renewal->first.message();
    EXPECT_TRUE(renewal->second.starts_with("NOPERM")) << renewal->second;
  }());
}

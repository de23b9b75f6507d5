// SPDX-License-Identifier: MIT
// async_acquire_all: the mutexes of several resources, all or none. Guards in the order
// given; nothing held or queued after a held resource, a timeout or a cancellation; no
// deadlock between callers naming overlapping sets in opposite orders; one script for the
// resources of one slot.
#include "live.hpp"

#include "background.hpp"
#include "keys.hpp"
#include "lease_sets.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_future.hpp>

#include <thread>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

using Guards = std::vector<LockGuard>;

std::vector<std::string> names(int n) {
  const auto base = unique_resource();
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(base + ":" + std::to_string(i));
  return out;
}

std::string mutex_queue(const std::string& resource) {
  return detail::make_keys("lock:", resource).queue();
}

/// calls=N of `command` in INFO commandstats of the server on `port`.
long long calls(std::uint16_t port, const std::string& command) {
  const auto info = redis_command(port, {"INFO", "commandstats"});
  const auto at = info.find("cmdstat_" + command + ":calls=");
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + command.size() + 15));
}

}  // namespace

TEST(AcquireAll, EveryGuardOwnsItsResourceInTheOrderGiven) {
  auto cfg = shared_server_config();
  auto resources = names(4);
  std::swap(resources[0], resources[3]);  // not in sorted order
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto guards = locks.async_acquire_all(resources, {.ttl = 10s}, asio::use_future).get();
  ASSERT_EQ(guards.size(), resources.size());
  for (std::size_t i = 0; i < resources.size(); ++i) {
    EXPECT_TRUE(guards[i]) << i;
    EXPECT_EQ(guards[i].resource(), resources[i]);
    EXPECT_GT(guards[i].fencing_token(), 0u);
    EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resources[i])})),
              guards[i].token());
    // Each is an ordinary mutex: async_acquire finds it held.
    EXPECT_FALSE(locks.async_acquire(resources[i], {.ttl = 1s}, asio::use_future).get());
  }
  for (auto& g : guards) EXPECT_TRUE(g.async_release(asio::use_future).get());
  for (const auto& r : resources) {
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(r)}), "0") << r;
  }
}

TEST(AcquireAll, AResourceHeldElsewhereMeansNothingIsHeldOrQueued) {
  auto cfg = shared_server_config();
  const auto resources = names(3);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager other(bg.io.get_executor(), cfg);
  auto held = other.async_acquire(resources[2], {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  // No wait: one attempt each.
  auto [ec, guards] =
      outcome<Guards>([&](auto h) { locks.async_acquire_all(resources, {.ttl = 10s}, h); });
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(guards.empty());
  // With a wait that runs out while it waits in the held resource's queue.
  const auto start = std::chrono::steady_clock::now();
  std::tie(ec, guards) = outcome<Guards>(
      [&](auto h) { locks.async_acquire_all(resources, {.ttl = 10s, .wait = 300ms}, h); });
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(guards.empty());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  // The releases were queued before the completion ran: a command sent now comes after them.
  for (std::size_t i = 0; i < 2; ++i) {
    auto g = locks.async_acquire(resources[i], {.ttl = 1s}, asio::use_future).get();
    EXPECT_TRUE(g) << "resource " << i << " was left held";
  }
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resources[2])})),
            held.token() + "+")
      << "the holder's lease was touched (the '+' says a waiter queued once)";
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[2])}) == "0";
      },
      2s, "the queue to be empty");
}

TEST(AcquireAll, WaitsForAHeldResourceThenHoldsThemAll) {
  auto cfg = shared_server_config();
  const auto resources = names(3);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager other(bg.io.get_executor(), cfg);
  auto held = other.async_acquire(resources[1], {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto all = locks.async_acquire_all(resources, {.ttl = 10s, .wait = 10s}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[1])}) == "1";
      },
      5s, "the acquire to queue");
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resources[0])}), "1")
      << "the first resource (in order) is held while the second is waited for";
  ASSERT_TRUE(held.async_release(asio::use_future).get());
  ASSERT_EQ(all.wait_for(10s), std::future_status::ready);
  auto guards = all.get();
  ASSERT_EQ(guards.size(), 3u);
  for (auto& g : guards) EXPECT_TRUE(g);
  EXPECT_GT(guards[1].fencing_token(), held.fencing_token());
}

TEST(AcquireAll, CallersNamingOverlappingSetsInOppositeOrdersNeverDeadlock) {
  auto cfg = shared_server_config();
  const auto r = names(3);
  const std::vector<std::vector<std::string>> sets = {
      {r[0], r[1], r[2]}, {r[2], r[1], r[0]}, {r[1], r[2]}, {r[2], r[0]}};
  Background bg;
  std::vector<std::unique_ptr<LockManager>> managers;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    managers.push_back(std::make_unique<LockManager>(bg.io.get_executor(), cfg));
  }
  std::atomic<int> in_use[3] = {0, 0, 0};
  std::atomic<int> overlaps{0}, taken{0};
  std::vector<std::thread> callers;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    callers.emplace_back([&, i] {
      for (int round = 0; round < 15; ++round) {
        auto guards = managers[i]
                          ->async_acquire_all(sets[i], {.ttl = 5s, .wait = 20s}, asio::use_future)
                          .get();
        if (guards.size() != sets[i].size()) continue;
        ++taken;
        std::vector<int> mine;
        for (const auto& name : sets[i])
          mine.push_back(static_cast<int>(std::find(r.begin(), r.end(), name) - r.begin()));
        for (int k : mine) overlaps += in_use[k]++ != 0;
        std::this_thread::sleep_for(1ms);
        for (int k : mine) --in_use[k];
        for (auto& g : guards) g.async_release(asio::use_future).get();
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(taken.load(), 15 * static_cast<int>(sets.size())) << "an acquire ran out of its wait";
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(AcquireAll, CancellationGivesBackWhatWasTaken) {
  auto cfg = shared_server_config();
  const auto resources = names(2);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager other(bg.io.get_executor(), cfg);
  auto held = other.async_acquire(resources[1], {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(held);
  asio::cancellation_signal cancel;
  std::promise<std::pair<error_code, std::size_t>> done;
  bg.run([&] {
    locks.async_acquire_all(
        resources, {.ttl = 30s, .wait = 20s},
        asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, Guards g) {
          done.set_value({ec, g.size()});
        }));
  });
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[1])}) == "1";
      },
      5s, "the acquire to queue for the second resource");
  ASSERT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resources[0])}), "1");
  bg.run([&] { cancel.emit(asio::cancellation_type::terminal); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  const auto [ec, n] = f.get();
  EXPECT_EQ(ec, asio::error::operation_aborted);
  EXPECT_EQ(n, 0u);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"EXISTS", lease_key(resources[0])}) == "0";
      },
      2s, "the first resource to be given back");
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[1])}) == "0";
      },
      2s, "the queue place to be given back");
  EXPECT_TRUE(held.async_release(asio::use_future).get());
}

TEST(AcquireAll, BadInputIsRefusedBeforeAnythingIsSent) {
  auto cfg = shared_server_config();
  const auto r = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  const std::vector<std::vector<std::string>> bad = {{}, {r, r}, {r, ""}};
  for (const auto& resources : bad) {
    auto [ec, guards] =
        outcome<Guards>([&](auto h) { locks.async_acquire_all(resources, {.ttl = 1s}, h); });
    EXPECT_EQ(ec, error::invalid_argument) << resources.size();
    EXPECT_TRUE(guards.empty());
  }
  auto [ec, guards] =
      outcome<Guards>([&](auto h) { locks.async_acquire_all({r}, {.ttl = 0s}, h); });
  EXPECT_EQ(ec, error::invalid_argument);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(r)}), "0");
}

TEST(AcquireAll, TheResourcesOfOneSlotGoInOneScript) {
  RedisServer server;  // its own: the command counts are this test's alone
  ConnectionConfig cfg;
  cfg.port = server.port();
  const auto resources = names(5);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  // Once, so that the connection's set-up (its script loads) is not counted.
  auto first = locks.async_acquire(unique_resource(), {.ttl = 1s}, asio::use_future).get();
  ASSERT_TRUE(first);
  ASSERT_TRUE(first.async_release(asio::use_future).get());
  // (A script call is an FCALL where the server has the library, else an EVALSHA.)
  const auto script_calls = [&] {
    return calls(server.port(), "evalsha") + calls(server.port(), "fcall");
  };
  const auto before = script_calls();
  auto guards = locks.async_acquire_all(resources, {.ttl = 10s}, asio::use_future).get();
  ASSERT_EQ(guards.size(), resources.size());
  EXPECT_EQ(script_calls() - before, 1) << "a single server is one slot";
  for (auto& g : guards) g.async_release(asio::use_future).get();
}

// A lock taken early in a long wait would have little of its lease left when the last one
// comes: it is renewed meanwhile (and extended if short), so each has most of its ttl.
TEST(AcquireAll, LocksTakenEarlyInALongWaitStillHaveMostOfTheirTtlWhenHandedOut) {
  auto cfg = shared_server_config();
  const auto resources = names(2);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager other(bg.io.get_executor(), cfg);
  // resources[1] lapses by itself after 450 ms: the wait takes most of resources[0]'s 600.
  auto held = other.async_acquire(resources[1], {.ttl = 450ms}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto guards =
      locks.async_acquire_all(resources, {.ttl = 600ms, .wait = 5s}, asio::use_future).get();
  const auto now = std::chrono::steady_clock::now();
  ASSERT_EQ(guards.size(), 2u);
  for (const auto& g : guards) {
    EXPECT_GE(g.valid_until() - now, 350ms) << g.resource();
    EXPECT_GE(std::stoll(redis_command(cfg.port, {"PTTL", lease_key(g.resource())})), 350);
  }
}

// A lock lost while the next was waited for (its renewal refused: someone else has it) is
// not handed out: everything is released and taken again from the start, within the wait.
TEST(AcquireAll, ALockLostWhileTheNextWasWaitedForIsTakenAgain) {
  auto cfg = shared_server_config();
  const auto resources = names(2);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager other(bg.io.get_executor(), cfg);
  auto held = other.async_acquire(resources[1], {.ttl = 1500ms}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto all = locks.async_acquire_all(resources, {.ttl = 600ms, .wait = 10s}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[1])}) == "1";
      },
      5s, "resources[0] taken and resources[1] waited for");
  const auto first = redis_command(cfg.port, {"GET", lease_key(resources[0])});
  // Someone else takes resources[0] over (as a failover that lost the lease would let them).
  redis_command(cfg.port, {"SET", lease_key(resources[0]), "intruder", "PX", "700"});
  ASSERT_EQ(all.wait_for(10s), std::future_status::ready);
  auto guards = all.get();
  ASSERT_EQ(guards.size(), 2u);
  EXPECT_NE(guards[0].token(), first) << "the lost lock was handed out";
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resources[0])})),
            guards[0].token());
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resources[1])})),
            guards[1].token());
  EXPECT_FALSE(guards[0].lost());
}

// The same when the wait runs out first: no guard, nothing left held.
TEST(AcquireAll, ALockLostWhenTheWaitRunsOutMeansNone) {
  auto cfg = shared_server_config();
  const auto resources = names(2);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager other(bg.io.get_executor(), cfg);
  // Connected before the timings start.
  auto warm = locks.async_acquire(unique_resource("warm"), {.ttl = 1s}, asio::use_future).get();
  ASSERT_TRUE(warm.async_release(asio::use_future).get());
  // resources[1] comes free after 1.5 s, resources[0] is lost meanwhile, and the 2.5 s wait
  // runs out while it is taken again (the intruder keeps it for 30 s).
  auto held = other.async_acquire(resources[1], {.ttl = 1500ms}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto all = locks.async_acquire_all(resources, {.ttl = 600ms, .wait = 2500ms}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[1])}) == "1";
      },
      5s, "resources[0] taken and resources[1] waited for");
  redis_command(cfg.port, {"SET", lease_key(resources[0]), "intruder", "PX", "30000"});
  ASSERT_EQ(all.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(all.get().empty());
  // (With the '+' of a waiter that queued for it once: the start over, which gave up.)
  EXPECT_EQ(redis_command(cfg.port, {"GET", lease_key(resources[0])}).rfind("intruder", 0), 0u);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", mutex_queue(resources[0])}) == "0";
      },
      5s, "the queue place to be given back");
  wait_until(
      [&] {
        return redis_command(cfg.port, {"EXISTS", lease_key(resources[1])}) == "0";
      },
      5s, "resources[1] to be given back");
}

// SPDX-License-Identifier: MIT
// Redis Cluster: a real 3-master, 3-replica cluster on loopback per test. Routing by slot
// from one seed, a slot map of 16384 ranges, sharded pub/sub hand-off, MOVED after a slot
// moved, ASK and TRYAGAIN while a slot migrates, lock traffic on a migrating slot, and lock
// traffic through CLUSTER FAILOVER and through a master killed with kill -9.
#include "client_list.hpp"
#include "election_round.hpp"
#include "keys.hpp"
#include "live.hpp"
#include "lock_load.hpp"
#include "redis_cluster.hpp"
#include "tcp_proxy.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/use_future.hpp>

#include <future>
#include <set>
#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

std::uint16_t slot_of(const std::string& resource) { return detail::key_slot(lease_key(resource)); }

/// `n` resources whose lease keys all fall in `slot`.
std::vector<std::string> resources_in_slot(std::uint16_t slot, std::size_t n) {
  std::vector<std::string> out;
  const auto base = unique_resource();
  for (unsigned i = 0; out.size() < n; ++i) {
    auto candidate = base + ":" + std::to_string(i);
    if (slot_of(candidate) == slot) out.push_back(std::move(candidate));
  }
  return out;
}

std::string get_lease(RedisCluster& cluster, const std::string& resource) {
  return without_record(
      cluster.node(cluster.master_of(slot_of(resource))).command({"GET", lease_key(resource)}));
}

/// An io_context running on a thread of its own (for tests whose faults block this thread).
struct Background {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run_for(60s); }};
  ~Background() {
    work.reset();
    thread.join();
  }
};

/// For the load tests: resources over many slots, and the check that traffic continued in
/// the slots of the master that failed once the cluster was healthy again.
void check_load(LockLoad& load, RedisCluster& cluster, const std::vector<std::string>& resources,
                const std::set<std::uint16_t>& failed_slots, Clock::time_point healthy,
                bool exclusion_expected) {
  stop_and_check(load, "cluster", exclusion_expected);
  SCOPED_TRACE(load.summary());
  int after = 0;
  for (const auto& r : resources) {
    if (!failed_slots.count(slot_of(r))) continue;
    for (const auto& w : load.windows[r]) after += w.from > healthy;
  }
  EXPECT_GT(after, 0) << "no lock was taken in the failed master's slots after it was replaced";
  std::this_thread::sleep_for(load_options.ttl + 200ms);
  for (const auto& r : resources) EXPECT_EQ(get_lease(cluster, r), "(nil)") << r;
}

/// 24 resources, at least 4 in the slots of master 0.
std::vector<std::string> spread_resources(RedisCluster& cluster, std::set<std::uint16_t>& slots0) {
  std::vector<std::string> resources;
  int on_master0 = 0;
  const auto base = unique_resource();
  for (int i = 0; resources.size() < 24; ++i) {
    auto r = base + ":" + std::to_string(i);
    const bool mine = cluster.master_of(slot_of(r)) == 0;
    if (!mine && resources.size() >= 20 && on_master0 < 4) continue;
    if (mine) {
      ++on_master0;
      slots0.insert(slot_of(r));
    }
    resources.push_back(std::move(r));
  }
  return resources;
}

/// A counter from INFO `section` of node `i`: the number after `field` ("errorstat_MOVED:count="),
/// 0 when the line is absent.
long long info_count(RedisCluster& cluster, std::size_t i, const std::string& section,
                     const std::string& field) {
  const auto info = cluster.node(i).command({"INFO", section});
  const auto at = info.find(field);
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + field.size()));
}

long long info_sum(RedisCluster& cluster, const std::string& section, const std::string& field) {
  long long sum = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (cluster.node(i).running()) sum += info_count(cluster, i, section, field);
  }
  return sum;
}

/// Takes and releases every resource of `resources` at once (each release as soon as its
/// acquire completes), runs `io` until all is done, and returns what failed, one line each.
std::vector<std::string> take_and_release_all(LockManager& locks, asio::io_context& io,
                                              const std::vector<std::string>& resources) {
  std::vector<std::string> failures;
  std::size_t done = 0;
  for (const auto& r : resources) {
    locks.async_acquire(r, {.ttl = 10s}, [&, r](boost::system::error_code ec, LockGuard g) {
      if (ec || !g.owns_lock()) {
        failures.push_back("acquire " + r + ": " + (ec ? ec.message() : "not acquired"));
        ++done;
        return;
      }
      g.async_release([&, r](boost::system::error_code rec, bool released) {
        if (rec || !released) {
          failures.push_back("release " + r + ": " + (rec ? rec.message() : "not released"));
        }
        ++done;
      });
    });
  }
  io.restart();
  io.run_for(30s);  // returns as soon as nothing is pending
  if (done != resources.size()) failures.push_back("not every lock operation completed");
  return failures;
}

std::vector<std::string> fresh_resources(std::size_t n) {
  std::vector<std::string> out;
  const auto base = unique_resource();
  for (std::size_t i = 0; i < n; ++i) out.push_back(base + ":" + std::to_string(i));
  return out;
}

}  // namespace

// Issue 12 item 4: a Cluster resharded slot by slot has thousands of slot ranges. Its map
// (CLUSTER SLOTS: one entry per range) must load, and must never take lock traffic down.
TEST(Cluster, LockTrafficWithASlotMapOfSixteenThousandRanges) {
  RedisCluster cluster(3, 1, RedisCluster::Slots::interleaved);  // slot i on master i % 3
  asio::io_context io;
  LockManager locks(io.get_executor(), cluster.config(1));  // one seed: the map must load
  const auto first = take_and_release_all(locks, io, fresh_resources(300));
  EXPECT_TRUE(first.empty()) << first.size() << " failures, first: " << first.front();
  // The map loaded: fresh resources all over the slots meet no MOVED.
  const auto moved_before = info_sum(cluster, "errorstats", "errorstat_MOVED:count=");
  const auto second = take_and_release_all(locks, io, fresh_resources(300));
  EXPECT_TRUE(second.empty()) << second.size() << " failures, first: " << second.front();
  EXPECT_EQ(info_sum(cluster, "errorstats", "errorstat_MOVED:count="), moved_before)
      << "the slot map was not loaded";
  // A slot moves: its MOVED makes the manager load the 16384-range map again, while lock
  // traffic runs.
  const auto resources = fresh_resources(300);
  const auto slot = slot_of(resources[0]);
  cluster.move_slot(slot, (cluster.master_of(slot) + 1) % 3, [] {});
  const auto loads_before = info_sum(cluster, "commandstats", "cmdstat_cluster|slots:calls=");
  const auto third = take_and_release_all(locks, io, resources);
  EXPECT_TRUE(third.empty()) << third.size() << " failures, first: " << third.front();
  EXPECT_GT(info_sum(cluster, "commandstats", "cmdstat_cluster|slots:calls="), loads_before)
      << "the MOVED did not reload the map";
}

TEST(Cluster, ASlotMapThatArrivesAfterItsTimeoutIsStillApplied) {
  // The map's reply may come after its command timeout (a 16384-range map read by a loaded
  // machine): it is applied when it comes, unless a later map was applied meanwhile. Here
  // the one seed is reached through a proxy that answers every CLUSTER SLOTS 1.5 s late
  // (against a 1 s command timeout), and one master serves every slot (no MOVED teaches the
  // manager another node). Until the map is applied, every command goes to the seed, through
  // the proxy; once it is, they go to the master's own address.
  RedisCluster cluster(1, 0);
  TcpProxy seed(cluster.node(0).port());
  seed.delay_replies_after("SLOTS", 1500ms);
  auto cfg = cluster.config(1);
  cfg.nodes = {{"127.0.0.1", seed.port()}};
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        // Lock traffic (it asks for the map) until an acquire and its release pass the
        // proxy by (there is no signal for "the map is here"); without the late map, none
        // ever does.
        const auto until = std::chrono::steady_clock::now() + 10s;
        bool direct = false;
        int rounds = 0;
        while (!direct && std::chrono::steady_clock::now() < until) {
          ++rounds;
          const auto before = seed.bytes_from_clients();
          auto g =
              co_await locks.async_acquire(unique_resource(), {.ttl = 5s}, asio::use_awaitable);
          CO_ASSERT_TRUE(g.owns_lock());
          EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
          direct = seed.bytes_from_clients() == before;
          if (!direct) co_await sleep_for(50ms);
        }
        EXPECT_TRUE(direct) << "the late map was thrown away: " << rounds
                            << " rounds, each through the seed";
      },
      20s);
}

TEST(Cluster, LocksOnEveryMasterFromOneSeed) {
  RedisCluster cluster;
  asio::io_context io;
  LockManager locks(io.get_executor(), cluster.config(1));  // the map is discovered
  LockManager other(io.get_executor(), cluster.config());
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        std::vector<std::string> resources;
        for (int i = 0; i < 60; ++i) resources.push_back(unique_resource());
        std::vector<LockGuard> guards;
        std::set<std::size_t> masters;
        for (const auto& r : resources) {
          auto [ec, guard] =
              co_await locks.async_acquire(r, {.ttl = 10s}, asio::as_tuple(asio::use_awaitable));
          EXPECT_FALSE(ec) << ec.message();
          CO_ASSERT_TRUE(guard.owns_lock());
          EXPECT_GT(guard.fencing_token(), 0u);
          // The lease is on the master of its slot, nowhere else.
          EXPECT_EQ(get_lease(cluster, r), guard.token());
          masters.insert(cluster.master_of(slot_of(r)));
          guards.push_back(std::move(guard));
        }
        EXPECT_EQ(masters.size(), 3u);
        for (std::size_t i = 0; i < 10; ++i) {
          auto [ec, guard] = co_await other.async_acquire(resources[i], {.ttl = 10s},
                                                          asio::as_tuple(asio::use_awaitable));
          EXPECT_FALSE(ec);
          EXPECT_FALSE(guard.owns_lock()) << "two holders of " << resources[i];
        }
        const auto first_fence = guards[0].fencing_token();
        for (auto& g : guards) {
          auto [ec, released] = co_await g.async_release(asio::as_tuple(asio::use_awaitable));
          EXPECT_FALSE(ec);
          EXPECT_TRUE(released);
        }
        for (const auto& r : resources) EXPECT_EQ(get_lease(cluster, r), "(nil)");
        // The slot's fencing counter lives on the same master: the next token is larger.
        auto [ec, again] = co_await other.async_acquire(resources[0], {.ttl = 10s},
                                                        asio::as_tuple(asio::use_awaitable));
        EXPECT_FALSE(ec);
        EXPECT_GT(again.fencing_token(), first_fence);
      }(),
      30s);
}

TEST(Cluster, AnIdleManagerHoldsOneConnectionPerMasterItUsedAndNoneForTheMap) {
  // Connections a fleet can afford (docs/capacity.md): the slot map's connection closes once
  // the map is in, the subscriber connection once nobody waits; what stays is one command
  // connection per master the manager sent locks to.
  RedisCluster cluster;
  asio::io_context io;
  LockManager holder(io.get_executor(), cluster.config(), {.client_name = "fleetholder"});
  LockManager waiter(io.get_executor(), cluster.config(), {.client_name = "fleetmember"});
  const auto resource = unique_resource();
  const auto owner = cluster.master_of(slot_of(resource));
  const auto named = [&](const std::string& name) {
    int n = 0;
    for (std::size_t i = 0; i < 3; ++i) n += clients_named(cluster.node(i).port(), name);
    return n;
  };
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, held] = co_await holder.async_acquire(resource, {.ttl = 10s},
                                                        asio::as_tuple(asio::use_awaitable));
        CO_ASSERT_TRUE(held.owns_lock());
        std::optional<LockGuard> got;
        waiter.async_acquire(resource, {.ttl = 10s, .wait = 8s},
                             [&](boost::system::error_code e, LockGuard g) {
                               EXPECT_FALSE(e);
                               got = std::move(g);
                             });
        for (int i = 0; i < 300 && named("fleetmember:sub") == 0; ++i) co_await sleep_for(10ms);
        EXPECT_EQ(named("fleetmember:sub"), 1) << "the waiter never subscribed";
        auto [rec, released] = co_await held.async_release(asio::as_tuple(asio::use_awaitable));
        EXPECT_TRUE(released);
        for (int i = 0; i < 300 && !got; ++i) co_await sleep_for(10ms);
        CO_ASSERT_TRUE(got.has_value());
        EXPECT_TRUE(got->owns_lock());
        auto [rec2, released2] = co_await got->async_release(asio::as_tuple(asio::use_awaitable));
        EXPECT_TRUE(released2);
        // Settled: no map connection, no subscriber, one command connection on the owner.
        for (int i = 0; i < 300 && (named("fleetmember:sub") + named("fleetmember:topology") +
                                    named("fleetholder:topology")) > 0;
             ++i) {
          co_await sleep_for(10ms);
        }
        EXPECT_EQ(named("fleetmember:topology"), 0);
        EXPECT_EQ(named("fleetholder:topology"), 0);
        EXPECT_EQ(named("fleetmember:sub"), 0);
        EXPECT_EQ(named("fleetmember"), 1);
        const auto on_owner = cluster.node(owner).command({"CLIENT", "LIST"});
        EXPECT_NE(on_owner.find(" name=fleetmember "), std::string::npos) << on_owner;
      }(),
      20s);
}

TEST(Cluster, WaiterIsWokenBySpublishOnTheSlotsMaster) {
  RedisCluster cluster;
  asio::io_context io;
  LockManager holder_locks(io.get_executor(), cluster.config());
  LockManager waiter_locks(io.get_executor(), cluster.config());
  const auto resource = unique_resource();
  const auto owner = cluster.master_of(slot_of(resource));
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, held] = co_await holder_locks.async_acquire(resource, {.ttl = 10s},
                                                              asio::as_tuple(asio::use_awaitable));
        CO_ASSERT_TRUE(held.owns_lock());
        std::optional<Clock::time_point> acquired_at;
        std::uint64_t fence = 0;
        waiter_locks.async_acquire(resource, {.ttl = 10s, .wait = 8s},
                                   [&](boost::system::error_code e, LockGuard g) {
                                     EXPECT_FALSE(e);
                                     fence = g.fencing_token();
                                     acquired_at = Clock::now();
                                   });
        // The waiter subscribes to its manager's channel for this slot, on the slot's master.
        for (int i = 0; i < 200; ++i) {
          if (cluster.node(owner).command({"PUBSUB", "SHARDCHANNELS", "lock:notify:*"}) != "")
            break;
          co_await sleep_for(10ms);
        }
        EXPECT_NE(cluster.node(owner).command({"PUBSUB", "SHARDCHANNELS", "lock:notify:*"}), "");
        co_await sleep_for(50ms);  // asleep: a 10 s lease means no retry for 600 ms
        const auto held_fence = held.fencing_token();  // (the release moves the lease out)
        EXPECT_GT(held_fence, 0u);
        const auto released_at = Clock::now();
        auto [rec, released] = co_await held.async_release(asio::as_tuple(asio::use_awaitable));
        EXPECT_TRUE(released);
        while (!acquired_at && Clock::now() - released_at < 3s) co_await sleep_for(1ms);
        CO_ASSERT_TRUE(acquired_at.has_value());
        const auto gap = *acquired_at - released_at;
        std::printf("[ cluster  ] hand-off after release: %lld us\n",
                    static_cast<long long>(
                        std::chrono::duration_cast<std::chrono::microseconds>(gap).count()));
        EXPECT_LT(gap, 300ms) << "the waiter was not woken by the release";
        EXPECT_GT(fence, held_fence);
      }(),
      20s);
}

TEST(Cluster, ElectionsObserversInspectAndForceRelease) {
  // The election's lease lives on its slot's master; its announcements are PUBLISHed (the
  // Cluster forwards them to every node), so the observer's subscription may be anywhere.
  RedisCluster cluster;
  asio::io_context io;
  election_round(io, cluster.config());
}

TEST(Cluster, FollowsMovedWhenASlotMovedToAnotherMaster) {
  RedisCluster cluster;
  asio::io_context io;
  LockManager locks(io.get_executor(), cluster.config());
  const auto resource = unique_resource();
  const auto slot = slot_of(resource);
  const auto source = cluster.master_of(slot);
  const auto target = (source + 1) % 3;
  EXPECT_TRUE(acquire_once(locks, io, resource).owned);  // learns the map; released after
  io.restart();
  io.run_for(200ms);
  cluster.move_slot(slot, target, [] {});
  ASSERT_EQ(cluster.master_of(slot), target);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, guard] =
        co_await locks.async_acquire(resource, {.ttl = 10s}, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec) << ec.message();
    CO_ASSERT_TRUE(guard.owns_lock());
    EXPECT_EQ(without_record(cluster.node(target).command({"GET", lease_key(resource)})),
              guard.token());
    auto [rec, released] = co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(released);
  }());
  // The manager followed MOVED (the source refused once) rather than failing.
  EXPECT_NE(cluster.node(source).command({"INFO", "errorstats"}).find("errorstat_MOVED"),
            std::string::npos);
}

TEST(Cluster, AskAndTryAgainWhileASlotMigrates) {
  RedisCluster cluster;
  const auto first = unique_resource();
  const auto slot = slot_of(first);
  const auto resources = resources_in_slot(slot, 6);
  const auto source = cluster.master_of(slot);
  const auto target = (source + 1) % 3;
  Background bg;
  LockManager locks(bg.io.get_executor(), cluster.config());
  // Three auto-renewed leases in the slot: their renewals keep going while the keys move.
  const LockOptions renewed{.ttl = 900ms, .auto_renew = true, .renew_every = 150ms};
  std::vector<LockGuard> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(locks.async_acquire(resources[i], renewed, asio::use_future).get());
    ASSERT_TRUE(held.back().owns_lock());
  }
  const auto tryagain = [&](std::size_t node) {
    return info_count(cluster, node, "errorstats", "errorstat_TRYAGAIN:count=");
  };
  const auto scripts_run = [&](std::size_t node) {
    return info_count(cluster, node, "commandstats", "cmdstat_evalsha:calls=") +
           info_count(cluster, node, "commandstats", "cmdstat_fcall:calls=");
  };
  ASSERT_EQ(scripts_run(target), 0);  // nothing of ours lives on the target yet
  // A wait long enough for the whole move on a loaded machine: TRYAGAIN is retried until then.
  const LockOptions waiting{.ttl = 5s, .wait = 15s};

  cluster.begin_move(slot, source, target);
  // Migrating, no key moved: a new lease's acquire names the fence counter (on the source)
  // and its own lease and queue keys (absent): TRYAGAIN from the source, retried.
  auto during = locks.async_acquire(resources[3], waiting, asio::use_future);
  wait_until([&] { return tryagain(source) > 0; }, 10s, "TRYAGAIN from the migrating source");

  // One held lease moves (its holder's record is folded into it): its renewal (a script on
  // that one key) meets ASK on the source and runs on the target after ASKING. (The acquire
  // above still names the counter, which is on the source: TRYAGAIN there, never run on the
  // target.)
  ASSERT_TRUE(cluster.migrate_key(source, target, lease_key(resources[0])));
  wait_until([&] { return scripts_run(target) > 0; }, 10s, "a renewal to follow ASK");
  EXPECT_GT(info_count(cluster, target, "commandstats", "cmdstat_asking:calls="), 0);

  // The rest moves in one pass and the slot is handed over: the acquire gets it there.
  // (Not the fence counter alone first: see AcquireAndReleaseWaitOutASplitSlot.)
  cluster.migrate_keys(slot, source, target, static_cast<std::size_t>(-1));
  cluster.end_move(slot, source, target);
  ASSERT_EQ(cluster.master_of(slot), target);
  ASSERT_EQ(during.wait_for(20s), std::future_status::ready);
  auto guard = during.get();  // throws on an error
  EXPECT_TRUE(guard.owns_lock());
  EXPECT_EQ(without_record(cluster.node(target).command({"GET", lease_key(guard.resource())})),
            guard.token());
  EXPECT_TRUE(guard.async_release(asio::use_future).get());
  // Every held lease is renewed by the new owner: its PTTL there goes up between two looks.
  for (auto& g : held) {
    const auto key = lease_key(g.resource());
    long long last = std::stoll(cluster.node(target).command({"PTTL", key}));
    wait_until(
        [&] {
          const auto now = std::stoll(cluster.node(target).command({"PTTL", key}));
          const bool renewed_now = now > last;
          last = now;
          return renewed_now;
        },
        10s, "a renewal of " + g.resource() + " on the new owner");
  }
  for (auto& g : held) {
    EXPECT_FALSE(g.lost()) << g.resource();
    EXPECT_TRUE(g.async_extend(900ms, asio::use_future).get());
    EXPECT_EQ(without_record(cluster.node(target).command({"GET", lease_key(g.resource())})),
              g.token());
  }
  for (auto& g : held) EXPECT_TRUE(g.async_release(asio::use_future).get());
}

// When the fence counter has moved and a lease has not (or the other way round), every key
// of a command is missing on the source (ASK) while the target, after ASKING, has some of
// them: TRYAGAIN. Each TRYAGAIN retry goes to the source again, which answers ASK again.
// Those ASKs used to count against the limit of 5 redirects per command, which TRYAGAIN
// retries never reset: after ~160 ms the acquire failed with cluster_down whatever its wait,
// and the release failed, leaving its lease to its ttl. Now the acquire waits out the move
// within its wait, and a release within its lease's validity.
TEST(Cluster, AcquireAndReleaseWaitOutASplitSlot) {
  RedisCluster cluster;
  const auto slot = slot_of(unique_resource());
  const auto resources = resources_in_slot(slot, 2);
  const auto fence_key = detail::make_keys("lock:", resources[0]).fence();
  const auto source = cluster.master_of(slot);
  const auto target = (source + 1) % 3;
  Background bg;
  LockManager locks(bg.io.get_executor(), cluster.config());
  auto held = locks.async_acquire(resources[0], {.ttl = 20s}, asio::use_future).get();
  ASSERT_TRUE(held.owns_lock());
  cluster.begin_move(slot, source, target);
  // The counter alone moves: a new acquire meets ASK on the source, TRYAGAIN on the target.
  ASSERT_TRUE(cluster.migrate_key(source, target, fence_key));
  std::promise<std::pair<boost::system::error_code, LockGuard>> acquired;
  auto acquire = acquired.get_future();
  const auto acquire_sent = Clock::now();
  std::atomic<long long> acquire_ms{-1}, release_ms{-1};
  locks.async_acquire(
      resources[1], {.ttl = 5s, .wait = 15s}, [&](boost::system::error_code ec, LockGuard g) {
        acquire_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - acquire_sent)
                .count();
        acquired.set_value({ec, std::move(g)});
      });
  wait_until(
      [&] { return info_count(cluster, target, "errorstats", "errorstat_TRYAGAIN:count=") > 0; },
      10s, "TRYAGAIN from the importing target");
  // The held lease moves too: its release meets ASK on the source and, on the target, finds
  // the lease but not the queue keys: TRYAGAIN.
  ASSERT_TRUE(cluster.migrate_key(source, target, lease_key(resources[0])));
  std::promise<std::pair<boost::system::error_code, bool>> released_promise;
  auto release = released_promise.get_future();
  const auto release_sent = Clock::now();
  held.async_release([&](boost::system::error_code ec, bool ok) {
    release_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - release_sent).count();
    released_promise.set_value({ec, ok});
  });
  // The move ends 500 ms later, inside the command timeout (1 s): both can wait it out.
  std::this_thread::sleep_for(500ms);  // the fault's length, not a synchronisation
  cluster.migrate_keys(slot, source, target, static_cast<std::size_t>(-1));
  cluster.end_move(slot, source, target);
  ASSERT_EQ(acquire.wait_for(20s), std::future_status::ready);
  auto [ec, guard] = acquire.get();
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(guard.owns_lock());
  ASSERT_EQ(release.wait_for(20s), std::future_status::ready);
  auto [rec, released] = release.get();
  std::printf(
      "[ split    ] acquire completed after %lld ms, release after %lld ms; the move "
      "lasted 500 ms\n",
      acquire_ms.load(), release_ms.load());
  EXPECT_FALSE(rec) << rec.message();
  EXPECT_TRUE(released);
  EXPECT_EQ(cluster.node(target).command({"EXISTS", lease_key(resources[0])}), "0")
      << "the lease was left to its ttl";
}

// Issue 12 item 8: lock traffic on a slot while it migrates. The acquire script names four
// keys (lease, fence counter, queue, queue expiry) and the release three (lease, queue, queue
// expiry); the queue keys rarely exist. While the slot is MIGRATING (source) / IMPORTING
// (target, after ASKING), a multi-key command some of whose keys are missing is refused
// with TRYAGAIN until the slot has moved. This measures what that does to traffic: 8 loops
// on 8 resources of the slot (uncontended, so no queue keys), the slot held migrating for
// about a second (no key moved for 500 ms, then half of them for 500 ms), as a slow
// resharding of a slot with many keys would.
TEST(Cluster, LockTrafficWhileItsSlotMigrates) {
  RedisCluster cluster;
  const auto slot = slot_of(unique_resource());
  const auto resources = resources_in_slot(slot, 8);
  const auto source = cluster.master_of(slot);
  const auto target = (source + 1) % 3;
  LockLoad load(cluster.config(), resources, 8);
  std::this_thread::sleep_for(300ms);  // traffic before the move
  cluster.begin_move(slot, source, target);
  const auto began = Clock::now();
  std::this_thread::sleep_for(500ms);  // the fault's length, not a synchronisation
  const auto keys = std::stoul(
      cluster.node(source).command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}));
  cluster.migrate_keys(slot, source, target, std::max<std::size_t>(1, keys / 2));
  std::this_thread::sleep_for(500ms);
  cluster.migrate_keys(slot, source, target, static_cast<std::size_t>(-1));
  cluster.end_move(slot, source, target);
  const auto migrating_for = Clock::now() - began;
  ASSERT_EQ(cluster.master_of(slot), target);
  std::this_thread::sleep_for(300ms);  // traffic after the move
  load.stop();
  // Leases nobody holds any more: every loop has ended, each lease released or its release
  // failed; what is still there was left to its ttl.
  int left = 0;
  for (const auto& r : resources) {
    left += cluster.node(target).command({"EXISTS", lease_key(r)}) == "1";
  }
  int acquired_during = 0;  // locks taken while the slot was moving
  for (const auto& r : resources) {
    for (const auto& w : load.windows[r]) {
      acquired_during += w.from > began && w.from < began + migrating_for;
    }
  }
  int tryagain = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    tryagain += static_cast<int>(info_count(cluster, i, "errorstats", "errorstat_TRYAGAIN:count="));
  }
  std::printf(
      "[ migrate  ] %s (%d releases failed); migrating %lld ms, %d locks taken "
      "meanwhile; TRYAGAIN replies %d; leases still there at the end %d\n",
      load.summary().c_str(), load.release_errors,
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(migrating_for).count()),
      acquired_during, tryagain, left);
  stop_and_check(load, "migrate", true);  // exclusion holds; every operation completed once
  int acquired_after = 0;
  for (const auto& r : resources) {
    for (const auto& w : load.windows[r]) acquired_after += w.from > began + migrating_for;
  }
  EXPECT_GT(acquired_after, 0) << "no lock was taken in the slot after it moved";
  // A lease left behind is gone within its ttl.
  wait_until(
      [&] {
        for (const auto& r : resources) {
          if (cluster.node(target).command({"EXISTS", lease_key(r)}) != "0") return false;
        }
        return true;
      },
      load_options.ttl + 2s, "the leases left behind to expire");
}

TEST(Cluster, LockTrafficContinuesThroughClusterFailover) {
  RedisCluster cluster;
  std::set<std::uint16_t> slots0;
  const auto resources = spread_resources(cluster, slots0);
  // The old master holds its clients' writes until the replica has caught up and taken
  // over: 20-70 ms on a quiet machine, 320 ms seen in CI with both cores busy (CI saw 8 and 9
  // commands time out with the load's 300 ms timeout). The library's default timeout (1 s)
  // covers the pause; a shorter one turns it into timeouts (docs/safety.md).
  LockLoad load(cluster.config(), resources, 8, load_options, ConnectionConfig{}.command_timeout);
  std::this_thread::sleep_for(500ms);
  cluster.failover(cluster.replica_of(0));
  const auto healthy = Clock::now();
  std::this_thread::sleep_for(800ms);
  // A manual failover waits for the replica to catch up: no lease is lost, so exclusion
  // holds throughout, and (docs/safety.md) no operation fails.
  check_load(load, cluster, resources, slots0, healthy, true);
  EXPECT_TRUE(load.errors.empty()) << load.summary();
}

TEST(Cluster, LockTrafficContinuesAfterAMasterIsKilled) {
  RedisCluster cluster;
  std::set<std::uint16_t> slots0;
  const auto resources = spread_resources(cluster, slots0);
  LockLoad load(cluster.config(), resources, 8);
  std::this_thread::sleep_for(500ms);
  const auto killed = Clock::now();
  cluster.node(0).kill(SIGKILL);
  cluster.wait_healthy();  // its replica took over (node timeout 3 s + election)
  const auto healthy = Clock::now();
  std::printf("[ kill     ] the cluster was healthy again %lld ms after the kill\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(healthy - killed).count()));
  std::this_thread::sleep_for(800ms);
  // Replication is asynchronous: a lease written just before the kill may not have reached
  // the replica, so exclusion is not asserted here (docs/safety.md; min_replicas narrows it).
  check_load(load, cluster, resources, slots0, healthy, false);
  EXPECT_TRUE(load.saw(error::connection_lost) || load.saw(error::connect_failed) ||
              load.saw(error::timeout) || load.saw(error::cluster_down));
}

TEST(Cluster, MinReplicasWaitsForTheSlotsReplica) {
  RedisCluster cluster;
  asio::io_context io;
  LockManager locks(io.get_executor(), cluster.config());
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    // Each master has one replica: one confirmation comes, two cannot.
    auto [ec, guard] = co_await locks.async_acquire(
        resource, {.ttl = 10s, .min_replicas = 1, .replication_timeout = 2s},
        asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(guard.owns_lock());
    auto [rec, released] = co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(released);
    auto [ec2, none] = co_await locks.async_acquire(
        resource, {.ttl = 10s, .min_replicas = 2, .replication_timeout = 100ms},
        asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec2, error::not_replicated);
    EXPECT_FALSE(none.owns_lock());
    // Given back: the give-back follows the refusal, so wait for it (bounded).
    for (const auto until = Clock::now() + 5s;
         get_lease(cluster, resource) != "(nil)" && Clock::now() < until;) {
      co_await sleep_for(5ms);
    }
    EXPECT_EQ(get_lease(cluster, resource), "(nil)");
  }());
}

TEST(Cluster, IdleManagerLeavesNoWork) {
  RedisCluster cluster;
  // (Cluster: from one seed, so the map is loaded and a MOVED followed on the way.)
  expect_idle_after_one_lock(cluster.config(1), unique_resource());
}

TEST(Cluster, ClusterDownIsRetriedThenEndsInClusterDown) {
  // docs/safety.md#cluster: CLUSTERDOWN (no master for a slot) is retried within the
  // command timeout (an acquire's wait, if longer), then the acquire fails with
  // cluster_down. Here the slot is served by nobody: CLUSTER DELSLOTS on every node.
  RedisCluster cluster(3, 0);
  auto cfg = cluster.config();
  cfg.command_timeout = 300ms;
  const auto resource = unique_resource();
  const auto slot = slot_of(resource);
  const auto owner = cluster.master_of(slot);
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  // The slot map is known (and the connections made) before the slot goes.
  {
    auto g = locks.async_acquire(resource, {.ttl = 5s}, asio::use_future).get();
    ASSERT_TRUE(g);
    EXPECT_TRUE(g.async_release(asio::use_future).get());
  }
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    ASSERT_EQ(cluster.node(i).command({"CLUSTER", "DELSLOTS", std::to_string(slot)}), "OK");
  }
  const auto downs = [&] {
    return info_sum(cluster, "errorstats", "errorstat_CLUSTERDOWN:count=");
  };
  const auto before = downs();
  auto started = Clock::now();
  // (Not use_future: its error travels as an exception_ptr, whose release TSan reports as a
  // race with the uninstrumented libstdc++.)
  std::promise<std::pair<boost::system::error_code, bool>> first;
  locks.async_acquire(resource, {.ttl = 5s}, [&](boost::system::error_code ec, LockGuard g) {
    first.set_value({ec, g.owns_lock()});
  });
  const auto [ec, owned] = first.get_future().get();
  EXPECT_EQ(ec, error::cluster_down) << ec.message();
  EXPECT_FALSE(owned) << "acquired in a slot nobody serves";
  const auto took = Clock::now() - started;
  EXPECT_GE(took, 250ms) << "not retried for the command timeout";
  EXPECT_LT(took, 2s);
  EXPECT_GE(downs() - before, 2) << "CLUSTERDOWN was not retried";

  // A waiting acquire keeps retrying for its wait: the slot comes back meanwhile (once the
  // acquire has met CLUSTERDOWN) and it gets the lock.
  const auto seen = downs();
  started = Clock::now();
  auto waiting = locks.async_acquire(resource, {.ttl = 5s, .wait = 15s}, asio::use_future);
  wait_until([&] { return downs() > seen; }, 5s, "the acquire to meet CLUSTERDOWN");
  ASSERT_EQ(cluster.node(owner).command({"CLUSTER", "ADDSLOTS", std::to_string(slot)}), "OK");
  ASSERT_EQ(waiting.wait_for(16s), std::future_status::ready);
  auto g = waiting.get();
  EXPECT_TRUE(g) << "the slot came back within the wait";
  EXPECT_EQ(without_record(cluster.node(owner).command({"GET", lease_key(resource)})), g.token());
}

// Issue 15: semaphores, read-write locks and async_acquire_all on a Cluster. A permit
// freed on one master is handed to a waiter through that slot's sharded channel; resources
// of several slots (on several masters) are taken together, those sharing a {tag} in one
// script on their slot's master.
TEST(Cluster, SemaphoresReadWriteLocksAndAcquireAllAcrossSlots) {
  RedisCluster cluster;
  Background bg;
  LockManager a(bg.io.get_executor(), cluster.config());
  LockManager b(bg.io.get_executor(), cluster.config(1));

  const auto semaphore = unique_resource("semaphore");
  auto held = a.async_acquire_permit(semaphore, 1, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto waiting = b.async_acquire_permit(semaphore, 1, {.ttl = 10s, .wait = 8s}, asio::use_future);
  const auto owner = cluster.master_of(slot_of(semaphore));
  wait_until(
      [&] {
        return cluster.node(owner).command({"PUBSUB", "SHARDCHANNELS", "lock:notify:*"}) != "";
      },
      5s, "the waiter to subscribe on the slot's master");
  const auto released_at = Clock::now();
  ASSERT_TRUE(held.async_release(asio::use_future).get());
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  auto permit = waiting.get();
  ASSERT_TRUE(permit);
  EXPECT_LT(Clock::now() - released_at, 300ms) << "the waiter was not handed the permit";
  EXPECT_GT(permit.fencing_token(), held.fencing_token());

  const auto rw = unique_resource("rw");
  auto reader = a.async_acquire_shared(rw, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(reader);
  EXPECT_TRUE(b.async_acquire_shared(rw, {.ttl = 10s}, asio::use_future).get());
  EXPECT_FALSE(b.async_acquire_exclusive(rw, {.ttl = 10s}, asio::use_future).get());

  // Nine resources: six over the slots of every master, three sharing one {tag}.
  std::vector<std::string> resources;
  std::set<std::size_t> masters;
  for (int i = 0; resources.size() < 6; ++i) {
    auto r = unique_resource() + ":" + std::to_string(i);
    if (masters.size() < 3 && masters.count(cluster.master_of(slot_of(r))) && i < 100) continue;
    masters.insert(cluster.master_of(slot_of(r)));
    resources.push_back(std::move(r));
  }
  const auto tag = "{" + unique_resource("tag") + "}";
  for (const char* s : {"a", "b", "c"}) resources.push_back(tag + s);
  EXPECT_EQ(slot_of(resources[6]), slot_of(resources[8]));
  auto guards = a.async_acquire_all(resources, {.ttl = 10s}, asio::use_future).get();
  ASSERT_EQ(guards.size(), resources.size());
  for (std::size_t i = 0; i < resources.size(); ++i) {
    EXPECT_EQ(guards[i].resource(), resources[i]);
    EXPECT_EQ(get_lease(cluster, resources[i]), guards[i].token()) << resources[i];
  }
  EXPECT_EQ(masters.size(), 3u);
  // One of them held: b gets none of them, and leaves none held.
  auto one = std::move(guards[7]);
  guards.clear();
  wait_until([&] { return get_lease(cluster, resources[0]) == "(nil)"; }, 5s, "the releases");
  EXPECT_TRUE(b.async_acquire_all(resources, {.ttl = 10s}, asio::use_future).get().empty());
  for (std::size_t i = 0; i < resources.size(); ++i) {
    if (i != 7) {
      EXPECT_EQ(get_lease(cluster, resources[i]), "(nil)") << resources[i];
    }
  }
  EXPECT_EQ(get_lease(cluster, resources[7]), one.token());
}

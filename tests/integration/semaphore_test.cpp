// SPDX-License-Identifier: MIT
// Semaphores (async_acquire_permit): at most `limit` holders, each permit its own lease,
// FIFO waiters woken one per freed permit, one limit per semaphore, one kind per resource.
#include "live.hpp"

#include "background.hpp"
#include "lease_sets.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_future.hpp>

#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(Semaphore, AtMostLimitHoldersEachWithALargerFencingToken) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  std::vector<LockGuard> permits;
  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    auto g = locks.async_acquire_permit(resource, 3, {.ttl = 10s}, asio::use_future).get();
    ASSERT_TRUE(g) << i;
    EXPECT_GT(g.fencing_token(), last);
    last = g.fencing_token();
    EXPECT_EQ(g.resource(), resource);
    permits.push_back(std::move(g));
  }
  EXPECT_EQ(holders(cfg.port, resource), 3);
  auto fourth = locks.async_acquire_permit(resource, 3, {.ttl = 10s}, asio::use_future).get();
  EXPECT_FALSE(fourth) << "a fourth holder of a semaphore of 3";
  EXPECT_EQ(holders(cfg.port, resource), 3);

  ASSERT_TRUE(permits[1].async_release(asio::use_future).get());
  auto again = locks.async_acquire_permit(resource, 3, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(again);
  EXPECT_GT(again.fencing_token(), last);
  for (auto& p : permits) p.async_release(asio::use_future).get();
  again.async_release(asio::use_future).get();
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0")
      << "the last release leaves no key behind";
}

TEST(Semaphore, WaitersAreWokenOnePerFreedPermitInArrivalOrder) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager holder_mgr(bg.io.get_executor(), cfg);
  auto a = holder_mgr.async_acquire_permit(resource, 2, {.ttl = 30s}, asio::use_future).get();
  auto b = holder_mgr.async_acquire_permit(resource, 2, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(a && b);

  constexpr int n = 4;
  std::vector<std::unique_ptr<LockManager>> managers;
  std::vector<Pending> waiters;
  for (int i = 0; i < n; ++i) {
    managers.push_back(std::make_unique<LockManager>(bg.io.get_executor(), cfg));
    waiters.push_back(managers.back()->async_acquire_permit(resource, 2, {.ttl = 30s, .wait = 20s},
                                                            asio::use_future));
    wait_until([&] { return queued(cfg.port, resource) == i + 1; }, 10s, "the waiter to queue");
  }
  ASSERT_TRUE(a.async_release(asio::use_future).get());
  ASSERT_EQ(waiters[0].wait_for(10s), std::future_status::ready);
  auto first = waiters[0].get();
  ASSERT_TRUE(first) << "the first waiter takes the freed permit";
  EXPECT_EQ(holders(cfg.port, resource), 2);
  EXPECT_EQ(queued(cfg.port, resource), n - 1) << "one permit wakes one waiter";
  for (int i = 1; i < n; ++i) {
    EXPECT_EQ(waiters[i].wait_for(0s), std::future_status::timeout) << i;
  }

  ASSERT_TRUE(b.async_release(asio::use_future).get());
  ASSERT_EQ(waiters[1].wait_for(10s), std::future_status::ready);
  auto second = waiters[1].get();
  ASSERT_TRUE(second);
  EXPECT_GT(second.fencing_token(), first.fencing_token());
  EXPECT_EQ(queued(cfg.port, resource), n - 2);

  // Both permits freed at once: the next two go in together.
  first.async_release(asio::use_future).get();
  second.async_release(asio::use_future).get();
  for (int i = 2; i < n; ++i) {
    ASSERT_EQ(waiters[i].wait_for(10s), std::future_status::ready) << i;
    EXPECT_TRUE(waiters[i].get()) << i;
  }
}

TEST(Semaphore, AZeroLimitIsRefusedBeforeAnythingIsSent) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  std::optional<error_code> result;
  locks.async_acquire_permit(resource, 0, {.ttl = 1s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(g);
    result = ec;
  });
  io.run_for(5s);
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::invalid_argument);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(Semaphore, AnotherLimitIsRefusedWhileItIsHeldAndTakenOnceItIsIdle) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto held = locks.async_acquire_permit(resource, 3, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto [ec, other] =
      outcome([&](auto h) { locks.async_acquire_permit(resource, 5, {.ttl = 10s}, h); });
  EXPECT_EQ(ec, error::limit_mismatch) << ec.message();
  EXPECT_FALSE(other);
  EXPECT_EQ(holders(cfg.port, resource), 1) << "the refused acquire changed nothing";
  ASSERT_TRUE(held.async_release(asio::use_future).get());
  auto five = locks.async_acquire_permit(resource, 5, {.ttl = 10s}, asio::use_future).get();
  EXPECT_TRUE(five) << "an idle semaphore takes the next caller's limit";
}

TEST(Semaphore, AResourceIsOneKindOfLockAtATime) {
  auto cfg = shared_server_config();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  const auto mutex = unique_resource("mutex");
  auto m = locks.async_acquire(mutex, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(m);
  for (auto kind : {0, 1, 2}) {
    SCOPED_TRACE(kind);
    auto [ec, g] = outcome([&](auto h) {
      if (kind == 0) locks.async_acquire_permit(mutex, 2, {.ttl = 1s}, h);
      if (kind == 1) locks.async_acquire_shared(mutex, {.ttl = 1s}, h);
      if (kind == 2) locks.async_acquire_exclusive(mutex, {.ttl = 1s}, h);
    });
    EXPECT_EQ(ec, error::wrong_type) << ec.message();
    EXPECT_FALSE(g);
  }
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(mutex)})), m.token())
      << "the mutex is intact";

  const auto semaphore = unique_resource("semaphore");
  auto p = locks.async_acquire_permit(semaphore, 2, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(p);
  {
    auto [ec, g] = outcome([&](auto h) { locks.async_acquire(semaphore, {.ttl = 1s}, h); });
    EXPECT_EQ(ec, error::wrong_type) << ec.message();
  }
  {
    auto [ec, g] = outcome([&](auto h) { locks.async_acquire_shared(semaphore, {.ttl = 1s}, h); });
    EXPECT_EQ(ec, error::wrong_type) << ec.message();
    EXPECT_NE(locks.last_server_error().find("semaphore"), std::string::npos)
        << locks.last_server_error();
  }
  EXPECT_EQ(holders(cfg.port, semaphore), 1);
  EXPECT_TRUE(p.async_release(asio::use_future).get());
}

TEST(Semaphore, AResourceIsFreeForAnyKindOnceItsLastLiveHoldEnds) {
  // A lease set's key lives as long as its last live hold (and its queue), not as long as
  // the longest ttl it ever granted: once no hold is live and nobody waits, a mutex or a
  // semaphore of another limit takes the resource. The longest hold ends early two ways:
  // it is released while a shorter one lives on (free when that one ends), or it is
  // extended down (free within a queue place's life, 1.2 s, of its end: extend_set.lua
  // names the lease set alone, so it cannot see whether waiters are queued).
  auto cfg = shared_server_config();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  // 0: a permit of a semaphore of 2, 1: a shared hold, 2: an exclusive hold.
  const auto take = [&](int kind, const std::string& resource, std::chrono::milliseconds ttl) {
    if (kind == 0)
      return locks.async_acquire_permit(resource, 2, {.ttl = ttl}, asio::use_future).get();
    if (kind == 1)
      return locks.async_acquire_shared(resource, {.ttl = ttl}, asio::use_future).get();
    return locks.async_acquire_exclusive(resource, {.ttl = ttl}, asio::use_future).get();
  };
  // Waits until `linger` after `last`'s hold has ended on the server's clock, then takes
  // the resource as `next` (a mutex: -1, or a semaphore of 3: 3) at once.
  const auto taken_once_lapsed = [&](const std::string& resource, int kind, const LockGuard& last,
                                     int next, std::chrono::milliseconds linger) {
    const auto member = last.token() + (kind == 2 ? "x" : "s");
    const auto score = redis_command(cfg.port, {"ZSCORE", lease_key(resource), member});
    ASSERT_FALSE(score.empty()) << "the last hold is not live";
    server_clock_passes(cfg.port, std::stoll(score) + linger.count());
    auto [ec, g] = outcome([&](auto h) {
      if (next < 0) return locks.async_acquire(resource, {.ttl = 5s}, h);
      locks.async_acquire_permit(resource, next, {.ttl = 5s}, h);
    });
    EXPECT_FALSE(ec) << ec.message() << " (" << locks.last_server_error() << ")";
    EXPECT_TRUE(g) << "an idle resource refused the next kind";
    if (g) {
      EXPECT_TRUE(g.async_release(asio::use_future).get());
    }
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
  };
  for (int kind : {0, 1, 2}) {
    for (int next : {-1, 3}) {
      SCOPED_TRACE("kind " + std::to_string(kind) + ", next " + std::to_string(next));
      {  // extended down
        const auto resource = unique_resource("extended");
        auto g = take(kind, resource, 60s);
        ASSERT_TRUE(g);
        ASSERT_TRUE(g.async_extend(300ms, asio::use_future).get());
        taken_once_lapsed(resource, kind, g, next, 1200ms);
      }
      if (kind == 2) continue;  // one exclusive hold at a time
      {                         // the longest released while a shorter one lives on
        const auto resource = unique_resource("released");
        auto longest = take(kind, resource, 60s);
        auto brief = take(kind, resource, 300ms);
        ASSERT_TRUE(longest && brief);
        ASSERT_TRUE(longest.async_release(asio::use_future).get());
        taken_once_lapsed(resource, kind, brief, next, 0ms);
      }
    }
  }
}

TEST(Semaphore, AnExpiredPermitIsNeitherReleasedNorExtendedAndFreesNobodyElse) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto old = locks.async_acquire_permit(resource, 1, {.ttl = 300ms}, asio::use_future).get();
  ASSERT_TRUE(old);
  // The key lives as long as its longest lease: gone, the permit has expired on the server.
  wait_until(
      [&] {
        return redis_command(cfg.port, {"EXISTS", lease_key(resource)}) == "0";
      },
      5s, "the permit to expire");
  auto next = locks.async_acquire_permit(resource, 1, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(next);
  EXPECT_GT(next.fencing_token(), old.fencing_token());
  EXPECT_FALSE(old.async_extend(10s, asio::use_future).get());
  EXPECT_FALSE(old.async_release(asio::use_future).get());
  EXPECT_EQ(holders(cfg.port, resource), 1) << "the expired permit's release freed another";
  EXPECT_NE(redis_command(cfg.port, {"ZSCORE", lease_key(resource), next.token() + "s"}), "");
  EXPECT_TRUE(next.async_extend(10s, asio::use_future).get());
  EXPECT_TRUE(next.async_release(asio::use_future).get());
}

TEST(Semaphore, AnExpiredPermitNotYetPurgedIsNotExtended) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto longer = locks.async_acquire_permit(resource, 2, {.ttl = 20s}, asio::use_future).get();
  auto brief = locks.async_acquire_permit(resource, 2, {.ttl = 200ms}, asio::use_future).get();
  ASSERT_TRUE(longer && brief);
  // The key outlives the brief permit (its entry stays until someone purges it): wait on the
  // server's clock until the entry's score has passed.
  const auto member = brief.token() + "s";
  wait_until(
      [&] {
        const auto now_ms = server_ms(cfg.port);
        return std::stoll(redis_command(cfg.port, {"ZSCORE", lease_key(resource), member})) <
               now_ms;
      },
      5s, "the brief permit's lease to end");
  EXPECT_FALSE(brief.async_extend(10s, asio::use_future).get());
  EXPECT_FALSE(brief.async_release(asio::use_future).get());
  EXPECT_TRUE(longer.async_release(asio::use_future).get());
}

TEST(Semaphore, AnAutoRenewedPermitOutlivesItsTtl) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto p =
      locks.async_acquire_permit(resource, 1, {.ttl = 300ms, .auto_renew = true}, asio::use_future)
          .get();
  ASSERT_TRUE(p);
  const auto first_valid = p.valid_until();
  // Renewed at least twice: its validity moved a full ttl on.
  wait_until([&] { return p.valid_until() > first_valid + 300ms; }, 5s, "two renewals");
  EXPECT_FALSE(p.lost());
  auto other = locks.async_acquire_permit(resource, 1, {.ttl = 1s}, asio::use_future).get();
  EXPECT_FALSE(other) << "the renewed permit is still held";
  EXPECT_TRUE(p.async_release(asio::use_future).get());
}

TEST(Semaphore, ACancelledWaiterLeavesTheQueueAndTheNextTakesThePermit) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto held = locks.async_acquire_permit(resource, 1, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(held);
  asio::cancellation_signal cancel;
  std::promise<error_code> cancelled;
  bg.run([&] {
    locks.async_acquire_permit(
        resource, 1, {.ttl = 30s, .wait = 20s},
        asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, LockGuard g) {
          EXPECT_FALSE(g);
          cancelled.set_value(ec);
        }));
  });
  wait_until([&] { return queued(cfg.port, resource) == 1; }, 10s, "the waiter to queue");
  auto next = locks.async_acquire_permit(resource, 1, {.ttl = 30s, .wait = 20s}, asio::use_future);
  wait_until([&] { return queued(cfg.port, resource) == 2; }, 10s, "the second waiter to queue");
  bg.run([&] { cancel.emit(asio::cancellation_type::terminal); });
  auto f = cancelled.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(f.get(), asio::error::operation_aborted);
  wait_until([&] { return queued(cfg.port, resource) == 1; }, 5s, "the cancelled waiter to leave");
  ASSERT_TRUE(held.async_release(asio::use_future).get());
  ASSERT_EQ(next.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(next.get());
}

TEST(Semaphore, IsRefusedOnRedlock) {
  ConnectionConfig cfg;
  cfg.topology = Topology::redlock;
  cfg.nodes = {{"127.0.0.1", 1}, {"127.0.0.1", 2}, {"127.0.0.1", 3}};
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  std::vector<error_code> results;
  const auto record = [&](error_code ec, LockGuard) { results.push_back(ec); };
  locks.async_acquire_permit("r", 2, {}, record);
  locks.async_acquire_shared("r", {}, record);
  locks.async_acquire_exclusive("r", {}, record);
  io.run_for(5s);
  ASSERT_EQ(results.size(), 3u);
  for (auto ec : results) EXPECT_EQ(ec, error::invalid_argument) << ec.message();
}

TEST(Semaphore, IdleMeansIdleAfterAWait) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  LockManager other(io.get_executor(), cfg);
  int done = 0;
  LockGuard held;
  other.async_acquire_permit(resource, 1, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec);
    ASSERT_TRUE(g);
    held = std::move(g);
    locks.async_acquire_permit(resource, 1, {.ttl = 5s, .wait = 5s},
                               [&](error_code ec2, LockGuard mine) {
                                 EXPECT_FALSE(ec2);
                                 EXPECT_TRUE(mine);
                                 mine.async_release([&](error_code, bool) { ++done; });
                               });
    // The waiter's first attempt goes out before this release: it is handed the permit.
    held = LockGuard{};
  });
  const auto start = std::chrono::steady_clock::now();
  io.run_for(10s);
  EXPECT_EQ(done, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(io.stopped()) << "a timer or read stayed armed after the work was done";
}

namespace {

/// A manager whose io thread the test can block, as a paused process (SIGSTOP) would be: it
/// sends nothing, and its waiter neither refreshes its place nor takes a free lock.
struct FreezableManager {
  explicit FreezableManager(const ConnectionConfig& cfg) : locks(bg.io.get_executor(), cfg) {
    // Connected (and its scripts loaded) before the test's timings start.
    auto warm = locks.async_acquire(unique_resource("warm"), {.ttl = 1s}, asio::use_future).get();
    EXPECT_TRUE(warm.async_release(asio::use_future).get());
  }
  ~FreezableManager() { thaw(); }
  /// Returns once the io thread is blocked.
  void freeze() {
    std::promise<void> frozen;
    asio::post(bg.io, [&frozen, f = thawed.get_future().share()] {
      frozen.set_value();
      f.wait();
    });
    frozen.get_future().wait();
  }
  void thaw() {
    if (!thawed_set) thawed.set_value();
    thawed_set = true;
  }
  Background bg;
  LockManager locks;
  std::promise<void> thawed;
  bool thawed_set = false;
};

}  // namespace

// The kind and limit stay with the resource while anyone waits, also once every hold has
// lapsed: the waiters' queue keeps the marker (and the key) alive. The holder's lease (600
// ms) is shorter than the waiter's place (1.2 s); the waiter is frozen once queued, so that
// it can take the free permit only after the test looked.
TEST(Semaphore, TheLimitStaysWhileOnlyWaitersRemain) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  FreezableManager waiter(cfg);
  auto held = locks.async_acquire_permit(resource, 1, {.ttl = 600ms}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto waiting =
      waiter.locks.async_acquire_permit(resource, 1, {.ttl = 10s, .wait = 20s}, asio::use_future);
  wait_until([&] { return queued(cfg.port, resource) == 1; }, 10s, "the waiter to queue");
  waiter.freeze();
  // Past the holder's expiry on the server (when, without the waiter, the key would have
  // expired with it).
  const auto member = held.token() + "s";
  wait_until(
      [&] {
        const auto score = redis_command(cfg.port, {"ZSCORE", lease_key(resource), member});
        if (score == "(nil)" || score.empty()) return true;
        const auto now_ms = server_ms(cfg.port);
        return std::stoll(score) < now_ms;
      },
      5s, "the holder's lease to lapse");
  EXPECT_EQ(redis_command(cfg.port, {"ZRANGE", lease_key(resource), "-1", "-1"}), "#S1")
      << "the kind and limit went with the last hold";
  auto [ec, other] =
      outcome([&](auto h) { locks.async_acquire_permit(resource, 5, {.ttl = 10s}, h); });
  EXPECT_EQ(ec, error::limit_mismatch) << ec.message();
  std::tie(ec, other) = outcome([&](auto h) { locks.async_acquire(resource, {.ttl = 10s}, h); });
  EXPECT_EQ(ec, error::wrong_type) << ec.message();
  std::tie(ec, other) =
      outcome([&](auto h) { locks.async_acquire_shared(resource, {.ttl = 10s}, h); });
  EXPECT_EQ(ec, error::wrong_type) << ec.message();
  waiter.thaw();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
}

// A mutex's waiters keep the resource a mutex: a semaphore cannot take it over while the
// mutex's lease has lapsed and its (frozen) waiter has not claimed it yet.
TEST(Semaphore, AMutexsWaitersKeepItAMutex) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  FreezableManager waiter(cfg);
  auto held = locks.async_acquire(resource, {.ttl = 600ms}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto waiting = waiter.locks.async_acquire(resource, {.ttl = 10s, .wait = 20s}, asio::use_future);
  const auto queue = detail::make_keys("lock:", resource).queue();
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", queue}) == "1";
      },
      10s, "the waiter to queue");
  waiter.freeze();
  wait_until(
      [&] {
        return redis_command(cfg.port, {"EXISTS", lease_key(resource)}) == "0";
      },
      5s, "the holder's lease to lapse");
  ASSERT_EQ(redis_command(cfg.port, {"ZCARD", queue}), "1") << "the frozen waiter's place lapsed";
  auto [ec, permit] =
      outcome([&](auto h) { locks.async_acquire_permit(resource, 2, {.ttl = 10s}, h); });
  EXPECT_EQ(ec, error::wrong_type) << ec.message();
  EXPECT_FALSE(permit);
  waiter.thaw();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
}

// A hold that lapsed on a resource that is another kind of lock now: its release and its
// extension say "not ours" (false), not WRONGTYPE, and touch nothing.
TEST(Semaphore, ALapsedHoldOfAResourceThatChangedKindIsNotOursAndNoError) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto permit = locks.async_acquire_permit(resource, 1, {.ttl = 200ms}, asio::use_future).get();
  ASSERT_TRUE(permit);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"EXISTS", lease_key(resource)}) == "0";
      },
      5s, "the permit to lapse");
  auto mutex = locks.async_acquire(resource, {.ttl = 2s}, asio::use_future).get();
  ASSERT_TRUE(mutex);
  EXPECT_FALSE(permit.async_extend(10s, asio::use_future).get());
  EXPECT_FALSE(permit.async_release(asio::use_future).get());
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), mutex.token());
  wait_until(
      [&] {
        return redis_command(cfg.port, {"EXISTS", lease_key(resource)}) == "0";
      },
      5s, "the mutex to lapse");
  auto again = locks.async_acquire_permit(resource, 1, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(again);
  EXPECT_FALSE(mutex.async_extend(10s, asio::use_future).get());
  EXPECT_FALSE(mutex.async_release(asio::use_future).get());
  EXPECT_EQ(holders(cfg.port, resource), 1);
  EXPECT_TRUE(again.async_release(asio::use_future).get());
}

// A hold let in behind a waiter's queue leaves nothing once it lapses: while the waiter was
// queued the key lived as long as its place (1.2 s), longer than the hold it then took; the
// admit must fit the key to what is live, or the marker alone outlives the last hold and the
// resource refuses every other kind (wrong_type) for up to a place's life. Both holders
// "die": their guards are kept, unreleased, unrenewed.
TEST(Semaphore, AHoldLetInFromTheQueueLeavesNothingOnceItLapses) {
  auto cfg = shared_server_config();
  Background bg;
  LockManager first(bg.io.get_executor(), cfg);
  LockManager second(bg.io.get_executor(), cfg);
  // 0: a permit of a semaphore of 1, 1: an exclusive hold behind a shared one.
  for (int kind : {0, 1}) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    const auto resource = unique_resource();
    auto a = kind == 0
                 ? first.async_acquire_permit(resource, 1, {.ttl = 400ms}, asio::use_future).get()
                 : first.async_acquire_shared(resource, {.ttl = 400ms}, asio::use_future).get();
    ASSERT_TRUE(a);
    auto [ec, b] = outcome([&](auto h) {
      if (kind == 0) return second.async_acquire_permit(resource, 1, {.ttl = 200ms, .wait = 3s}, h);
      second.async_acquire_exclusive(resource, {.ttl = 200ms, .wait = 3s}, h);
    });
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_TRUE(b) << "let in once the first hold lapsed";
    const auto member = b.token() + (kind == 0 ? "s" : "x");
    const auto score = redis_command(cfg.port, {"ZSCORE", lease_key(resource), member});
    ASSERT_FALSE(score.empty()) << "the hold let in is not live";
    server_clock_passes(cfg.port, std::stoll(score));
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0")
        << "the key outlived its last hold: PTTL "
        << redis_command(cfg.port, {"PTTL", lease_key(resource)});
    auto [mutex_ec, m] = outcome([&](auto h) { first.async_acquire(resource, {.ttl = 5s}, h); });
    EXPECT_FALSE(mutex_ec) << mutex_ec.message() << " (" << first.last_server_error() << ")";
    EXPECT_TRUE(m) << "an idle resource refused a mutex";
    if (m) {
      EXPECT_TRUE(m.async_release(asio::use_future).get());
    }
  }
}

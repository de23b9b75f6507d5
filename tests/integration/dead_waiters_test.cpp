// SPDX-License-Identifier: MIT
// Many dead waiters ahead of a live one: a release never hands a lease, a permit or a hold
// to a queue place that has lapsed, however many lapsed places there are, and the live
// waiter behind them is served at the release (docs/safety.md, "Every mode").
#include "live.hpp"

#include "background.hpp"
#include "child_process.hpp"
#include "keys.hpp"

#include <boost/asio/use_future.hpp>

#include <cstdio>
#include <future>
#include <string>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

enum class Kind { mutex, semaphore, read_write };

struct Case {
  Kind kind;
  int dead;  // lapsed places ahead of the live waiter
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const char* kind = info.param.kind == Kind::mutex       ? "Mutex"
                     : info.param.kind == Kind::semaphore ? "Semaphore"
                                                          : "ReadWriteLock";
  return std::string(kind) + std::to_string(info.param.dead);
}

/// The acquire of this case's kind: a mutex, a permit of a semaphore of 1, or a read-write
/// lock's exclusive hold (so that one holder keeps everyone else out).
std::future<LockGuard> acquire(LockManager& locks, Kind kind, const std::string& resource,
                               LockOptions options) {
  switch (kind) {
    case Kind::mutex:
      return locks.async_acquire(resource, options, asio::use_future);
    case Kind::semaphore:
      return locks.async_acquire_permit(resource, 1, options, asio::use_future);
    case Kind::read_write:
      break;
  }
  return locks.async_acquire_exclusive(resource, options, asio::use_future);
}

/// `n` places queued behind the holder as a crashed process's waiters would have left them
/// (the member layout of acquire.lua and acquire_set.lua: token, manager id, [mode,] ttl).
/// Written directly: a process with thousands of waiters refreshing every 400 ms is too
/// slow to set up under the sanitizers (Waiting.* kill real waiter processes; the scripts
/// cannot tell the two apart). The read-write lock's alternate writers and readers, so that
/// both are skipped. They are live (for a minute) until lapse() dates them a second ago, as
/// a crash a second ago would have: so however slow the set-up, the live waiter queues
/// behind all of them first.
class DeadPlaces {
 public:
  DeadPlaces(std::uint16_t port, Kind kind, const detail::ResourceKeys& keys, int n)
      : port_(port), keys_(keys) {
    std::vector<std::string> queue{"ZADD", keys.queue()};
    char token[33];
    for (int i = 1; i <= n; ++i) {
      std::snprintf(token, sizeof token, "%032x", i);
      std::string member = std::string(token) + "00000000deadbeef";
      if (kind == Kind::read_write) member += i % 2 ? 'x' : 's';
      if (kind == Kind::semaphore) member += 's';
      member += "30000";
      queue.insert(queue.end(), {std::to_string(i), member});
      members_.push_back(std::move(member));
    }
    redis_command(port, queue);
    date(server_ms(port) + 60'000);
  }
  void lapse() { date(server_ms(port_) - 1000); }

 private:
  void date(long long place) {
    std::vector<std::string> expiry{"ZADD", keys_.queue_expiry()};
    for (const auto& m : members_) expiry.insert(expiry.end(), {std::to_string(place), m});
    redis_command(port_, expiry);
  }
  std::uint16_t port_;
  detail::ResourceKeys keys_;
  std::vector<std::string> members_;
};

class DeadWaiters : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(DeadWaiters, ALiveWaiterBehindLapsedPlacesIsServedAtTheRelease) {
  const auto [kind, dead] = GetParam();
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource, kind != Kind::mutex);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  auto holder = acquire(h, kind, resource, {.ttl = 30s}).get();
  ASSERT_TRUE(holder);
  DeadPlaces places(cfg.port, kind, keys, dead);
  auto live = acquire(w, kind, resource, {.ttl = 30s, .wait = 40s});
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", keys.queue()}) == std::to_string(dead + 1);
      },
      10s, "the live waiter to queue behind the dead ones");
  places.lapse();
  const auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(holder.async_release(asio::use_future).get());
  // Served by the release itself (its hand-off message), not by a refresh of its place
  // (400 ms) and surely not after a dead waiter's 30 s ttl: 1.5 s leaves room for a loaded
  // machine and the sanitizers.
  ASSERT_EQ(live.wait_for(10s), std::future_status::ready)
      << "the live waiter waited a dead one's ttl";
  const auto waited = std::chrono::steady_clock::now() - released;
  auto g = live.get();
  ASSERT_TRUE(g);
  EXPECT_LT(waited, 1500ms) << "served "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                            << " ms after the release";
  // Nothing was handed to a dead place: the only lease or hold is the live waiter's.
  if (kind == Kind::mutex) {
    EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}).substr(0, 32), g.token());
  } else {
    EXPECT_EQ(redis_command(cfg.port, {"ZCARD", keys.lease()}), "2") << "the marker and one hold";
  }
  EXPECT_TRUE(g.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.lease()}), "0");
  redis_command(cfg.port, {"DEL", keys.queue(), keys.queue_expiry()});
}

INSTANTIATE_TEST_SUITE_P(Kinds, DeadWaiters,
                         ::testing::Values(Case{Kind::mutex, 200}, Case{Kind::mutex, 5000},
                                           Case{Kind::semaphore, 200}, Case{Kind::semaphore, 5000},
                                           Case{Kind::read_write, 200},
                                           Case{Kind::read_write, 5000}),
                         name_of);

TEST(DeadWaiters, MoreLapsedPlacesThanOneCallRemovesAreNeverServedAndTheLiveWaiterStillIs) {
  // A call removes 10,000 lapsed places at most (shared.lua). With 12,000 ahead, the release
  // removes 10,000, finds the head still lapsed, and serves nobody: the lock is free, and
  // the live waiter's next refresh (400 ms) removes the rest and takes it.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  auto holder = acquire(h, Kind::mutex, resource, {.ttl = 30s}).get();
  ASSERT_TRUE(holder);
  DeadPlaces places(cfg.port, Kind::mutex, keys, 12'000);
  auto live = acquire(w, Kind::mutex, resource, {.ttl = 30s, .wait = 40s});
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", keys.queue()}) == "12001";
      },
      10s, "the live waiter to queue behind the dead ones");
  places.lapse();
  const auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(holder.async_release(asio::use_future).get());
  // Whatever the release did, no lapsed place holds the lease.
  const auto lease = redis_command(cfg.port, {"GET", keys.lease()});
  EXPECT_TRUE(lease.empty() || lease.substr(0, 8) != "00000000") << "a lapsed place got the lease";
  ASSERT_EQ(live.wait_for(10s), std::future_status::ready)
      << "the live waiter waited a dead one's ttl";
  const auto waited = std::chrono::steady_clock::now() - released;
  auto g = live.get();
  ASSERT_TRUE(g);
  // Its next refresh at most 400 ms later, and a round trip: 1.5 s leaves room for load.
  EXPECT_LT(waited, 1500ms) << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                            << " ms after the release";
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}).substr(0, 32), g.token());
  EXPECT_TRUE(g.async_release(asio::use_future).get());
  redis_command(cfg.port, {"DEL", keys.queue(), keys.queue_expiry()});
}

TEST(DeadWaiters, AHeadWithoutAPlaceEntryIsDroppedAndTheNextWaiterServed) {
  // A queue member whose place entry is gone (the expiry key evicted under a volatile-*
  // policy, or deleted by hand) has no place to lapse: it is dropped, never served and never
  // left to stand in front of the live waiters.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  auto holder = acquire(h, Kind::mutex, resource, {.ttl = 30s}).get();
  ASSERT_TRUE(holder);
  const std::string orphan = std::string(32, '0') + "00000000deadbeef30000";
  redis_command(cfg.port, {"ZADD", keys.queue(), "0", orphan});  // ahead of everyone, no place
  auto live = acquire(w, Kind::mutex, resource, {.ttl = 30s, .wait = 40s});
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", keys.queue_expiry()}) == "1";
      },
      10s, "the live waiter to queue");
  const auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(holder.async_release(asio::use_future).get());
  ASSERT_EQ(live.wait_for(10s), std::future_status::ready) << "the orphan stood in the way";
  const auto waited = std::chrono::steady_clock::now() - released;
  auto g = live.get();
  ASSERT_TRUE(g);
  EXPECT_LT(waited, 1500ms);
  EXPECT_EQ(redis_command(cfg.port, {"ZSCORE", keys.queue(), orphan}), "(nil)");
  EXPECT_TRUE(g.async_release(asio::use_future).get());
}

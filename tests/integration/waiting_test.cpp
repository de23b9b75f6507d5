// SPDX-License-Identifier: MIT
// Waiting acquires: FIFO hand-off across managers and processes, cancellation at each point,
// a queued waiter killed with SIGKILL, and idle-means-idle after waiting.
#include "live.hpp"

#include "background.hpp"
#include "child_process.hpp"
#include "client_list.hpp"
#include "keys.hpp"
#include "validity.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

detail::ResourceKeys keys_of(const std::string& resource) {
  return detail::make_keys("lock:", resource);
}

/// Polls Redis (there is no signal for "queued") until the queue holds `n` waiters.
bool wait_for_queue(std::uint16_t port, const std::string& resource, int n) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    if (redis_command(port, {"ZCARD", keys_of(resource).queue()}) == std::to_string(n)) return true;
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

}  // namespace

TEST(Waiting, WaitersAreServedInArrivalOrder) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager holder_mgr(bg.io.get_executor(), cfg);
  auto holder = holder_mgr.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);

  constexpr int n = 6;
  std::vector<std::unique_ptr<LockManager>> managers;
  std::mutex m;
  std::vector<int> order;
  std::vector<std::uint64_t> fences;
  std::promise<void> all_done;
  for (int i = 0; i < n; ++i) {
    managers.push_back(std::make_unique<LockManager>(bg.io.get_executor(), cfg));
    managers.back()->async_acquire(resource, {.ttl = 10s, .wait = 20s},
                                   [&, i](error_code ec, LockGuard g) {
                                     EXPECT_FALSE(ec) << ec.message();
                                     EXPECT_TRUE(g);
                                     std::lock_guard lock(m);
                                     order.push_back(i);
                                     fences.push_back(g.fencing_token());
                                     if (order.size() == n) all_done.set_value();
                                     // g's destructor releases: the lock moves on.
                                   });
    ASSERT_TRUE(wait_for_queue(cfg.port, resource, i + 1)) << "waiter " << i << " never queued";
  }
  holder.async_release(asio::use_future).get();
  ASSERT_EQ(all_done.get_future().wait_for(20s), std::future_status::ready);
  std::vector<int> expected(n);
  for (int i = 0; i < n; ++i) expected[i] = i;
  EXPECT_EQ(order, expected);
  EXPECT_TRUE(std::is_sorted(fences.begin(), fences.end()));
  EXPECT_EQ(std::adjacent_find(fences.begin(), fences.end()), fences.end());
  bg.run([] {});
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys_of(resource).queue()}), "0");
}

TEST(Waiting, FiftyWaitersInFiveProcessesNeverOverlap) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  std::vector<std::unique_ptr<ChildProcess>> procs;
  for (int p = 0; p < 5; ++p) {
    procs.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        REDIS_LOCK_WAITER_PATH, std::to_string(cfg.port), resource, "10", "3", "30000"}));
  }
  struct Hold {
    std::uint64_t fence;
    long long start, end;
  };
  std::vector<Hold> holds;
  for (auto& p : procs) {
    for (std::string line = p->read_line(); !line.empty(); line = p->read_line()) {
      std::istringstream in(line);
      Hold h{};
      in >> h.fence >> h.start >> h.end;
      holds.push_back(h);
    }
    EXPECT_EQ(p->wait(), 0);
  }
  ASSERT_EQ(holds.size(), 50u);
  std::sort(holds.begin(), holds.end(),
            [](const Hold& a, const Hold& b) { return a.start < b.start; });
  for (std::size_t i = 1; i < holds.size(); ++i) {
    EXPECT_LE(holds[i - 1].end, holds[i].start) << "two holders at once at " << i;
    EXPECT_LT(holds[i - 1].fence, holds[i].fence) << "fencing token went backwards at " << i;
  }
}

TEST(Waiting, CancelWhileQueuedLeavesNothingBehind) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager a(bg.io.get_executor(), cfg);
  LockManager b(bg.io.get_executor(), cfg);
  auto holder = a.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  asio::cancellation_signal cancel;
  std::promise<error_code> result;
  bg.run([&] {
    b.async_acquire(resource, {.ttl = 5s, .wait = 20s},
                    asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, LockGuard g) {
                      EXPECT_FALSE(g);
                      result.set_value(ec);
                    }));
  });
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
  const auto start = std::chrono::steady_clock::now();
  bg.run([&] { cancel.emit(asio::cancellation_type::terminal); });
  auto fut = result.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(fut.get(), asio::error::operation_aborted);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 0)) << "the cancelled waiter stayed queued";
  holder.async_release(asio::use_future).get();
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0")
      << "the release handed the lease to a waiter that had gone";
}

TEST(Waiting, CancelBeforeTheReplyGivesBackWhatWasTaken) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  asio::cancellation_signal cancel;
  std::promise<error_code> result;
  bg.run([&] {
    locks.async_acquire(
        resource, {.ttl = 30s, .wait = 5s},
        asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, LockGuard g) {
          EXPECT_FALSE(g);
          result.set_value(ec);
        }));
    cancel.emit(asio::cancellation_type::terminal);  // the attempt is on its way, not back
  });
  auto fut = result.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(fut.get(), asio::error::operation_aborted);
  bg.run([] {});
  // Whether or not the attempt got there first, nothing may stay held: wait for the release.
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (redis_command(cfg.port, {"EXISTS", lease_key(resource)}) != "0" &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(Waiting, CancelAfterTheHandOffPassesTheLeaseOn) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = keys_of(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), a(bg.io.get_executor(), cfg),
      b(bg.io.get_executor(), cfg);
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  asio::cancellation_signal cancel;
  std::promise<error_code> a_result;
  std::promise<std::uint64_t> b_result;
  bg.run([&] {
    a.async_acquire(resource, {.ttl = 30s, .wait = 20s},
                    asio::bind_cancellation_slot(
                        cancel.slot(), [&](error_code ec, LockGuard) { a_result.set_value(ec); }));
  });
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
  auto b_fut = b.async_acquire(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 2));
  // Hand the lease to A behind its back, as a release would, minus the notification. Right
  // after one of A's refreshes (its place moves), so that its next one, which would claim the
  // lease, is 400 ms away while the cancellation below reaches it.
  const auto a_member = redis_command(cfg.port, {"ZRANGE", keys.queue(), "0", "0"});
  const auto a_token = a_member.substr(0, 32);
  const auto place = redis_command(cfg.port, {"ZSCORE", keys.queue_expiry(), a_member});
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZSCORE", keys.queue_expiry(), a_member}) != place;
      },
      5s, "A's next refresh");
  redis_command(cfg.port, {"ZREM", keys.queue(), a_member});
  redis_command(cfg.port, {"ZREM", keys.queue_expiry(), a_member});
  redis_command(cfg.port, {"SET", keys.lease(), a_token, "PX", "30000"});
  holder = LockGuard{};  // its release no longer matches: a no-op
  bg.run([&] { cancel.emit(asio::cancellation_type::terminal); });
  auto a_fut = a_result.get_future();
  ASSERT_EQ(a_fut.wait_for(5s), std::future_status::ready);
  // A was asleep (no notification), so it had not claimed yet: it must pass the lease on.
  EXPECT_EQ(a_fut.get(), asio::error::operation_aborted);
  ASSERT_EQ(b_fut.wait_for(5s), std::future_status::ready);
  auto b_guard = b_fut.get();
  EXPECT_TRUE(b_guard);
}

TEST(Waiting, AQueuedWaiterKilledWithSigkillHoldsBackTheLockForItsTtlAtMost) {
  // docs/safety.md "A client crashes": a release hands the lease to the first waiter whose
  // place is live, with that waiter's ttl. A waiter killed while queued (its place lasts
  // 1.2 s after its last refresh) can so be handed the lease after its death; the lease then
  // lapses after its ttl, like that of a holder killed right after it acquired, and the next
  // waiter has it then, not before.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = keys_of(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  ChildProcess doomed({REDIS_LOCK_WAITER_PATH, std::to_string(cfg.port), resource, "1", "60000",
                       "60000", "2000"});  // ttl 2 s
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
  const auto dead_member = redis_command(cfg.port, {"ZRANGE", keys.queue(), "0", "0"});
  auto fut = w.async_acquire(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 2));
  doomed.kill9();  // first in line, and dead
  const auto released_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(holder.async_release(asio::use_future).get());
  // Its place was still live: the release handed it the lease, for its ttl.
  const auto asked = std::chrono::steady_clock::now();
  const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", keys.lease()}));
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}).substr(0, 32),
            dead_member.substr(0, 32));
  EXPECT_GT(pttl, 1000);
  EXPECT_LE(pttl, 2000);
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  auto g = fut.get();
  EXPECT_TRUE(g);
  const auto now = std::chrono::steady_clock::now();
  // Not before the dead waiter's lease ran out on the server (at asked + pttl at least; less
  // 1 % for clock rates)...
  EXPECT_GE(now - asked, std::chrono::milliseconds(pttl) - 20ms) << "two holders at once";
  // ...and soon after: the live waiter looks again every 400 ms at most. (Its 2 s, one such
  // sleep, and room for a slow machine.)
  EXPECT_LT(now - released_at, 3400ms);
}

TEST(Waiting, IdleAgainAfterWaiting) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  asio::io_context io;
  LockManager a(io.get_executor(), cfg), b(io.get_executor(), cfg);
  int done = 0;
  a.async_acquire(resource, {.ttl = 10s}, [&](error_code, LockGuard held) {
    auto shared = std::make_shared<LockGuard>(std::move(held));
    b.async_acquire(resource, {.ttl = 10s, .wait = 10s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      EXPECT_TRUE(g);
      ++done;  // g released by its destructor
    });
    auto timer = std::make_shared<asio::steady_timer>(io, 50ms);
    timer->async_wait([timer, shared](error_code) { *shared = LockGuard{}; });
  });
  const auto start = std::chrono::steady_clock::now();
  io.run_for(10s);
  EXPECT_EQ(done, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s)
      << "the subscriber kept a read armed with no waiter left";
}

namespace {

/// Polls (every 5 ms, at most `limit`) until `clients_named` is `n`.
bool clients_become(std::uint16_t port, const std::string& name, int n,
                    std::chrono::milliseconds limit = 3s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (clients_named(port, name) != n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

/// Runs `fn` when its manager's acquire joins the queue, on that manager's thread, before
/// the waiter registers for hand-offs (and so before it subscribes).
struct OnWait : Observer {
  std::function<void()> fn;
  void on_wait(const WaitEvent&) noexcept override {
    if (fn) std::exchange(fn, nullptr)();
  }
};

}  // namespace

TEST(Waiting, TheSubscriberConnectionClosesWhenNobodyWaitsAndTheNextWaitMissesNoHandOff) {
  // A fleet of idle managers holds one connection each: the subscriber connection is open
  // while the manager waits, and closes when nobody does. The next wait connects and
  // subscribes again; a release that hands it the lease before its SUBSCRIBE is confirmed
  // (the message published to nobody) does not leave it waiting: its waiters look again
  // once subscribed (and poll until then).
  RedisServer server;
  const auto cfg = server.config();
  Background holder_side, waiter_side;
  LockManager h(holder_side.io.get_executor(), cfg, {.client_name = "holder"});
  auto observer = std::make_shared<OnWait>();
  LockManager w(waiter_side.io.get_executor(), cfg,
                {.client_name = "fleetwaiter", .observer = observer});

  // 1. An ordinary wait: subscribed while it waits, closed after.
  const auto first = unique_resource();
  auto held = h.async_acquire(first, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto got = w.async_acquire(first, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(server.port(), first, 1));
  EXPECT_TRUE(clients_become(server.port(), "fleetwaiter:sub", 1)) << "never subscribed";
  EXPECT_TRUE(held.async_release(asio::use_future).get());
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  auto mine = got.get();
  EXPECT_TRUE(mine);
  EXPECT_TRUE(mine.async_release(asio::use_future).get());
  EXPECT_TRUE(clients_become(server.port(), "fleetwaiter:sub", 0))
      << "the subscriber connection stayed open with nobody waiting";
  EXPECT_EQ(clients_named(server.port(), "fleetwaiter"), 1);  // its command connection

  // 2. The race: the holder releases (handing the lease to the waiter's place, publishing to
  // a channel nobody listens on yet) after the waiter queued, before it subscribes.
  const auto second = unique_resource();
  held = h.async_acquire(second, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(held);
  std::chrono::steady_clock::time_point released_at;
  observer->fn = [&] {
    EXPECT_TRUE(held.async_release(asio::use_future).get());
    released_at = std::chrono::steady_clock::now();
  };
  got = w.async_acquire(second, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  const auto ready_at = std::chrono::steady_clock::now();
  mine = got.get();
  ASSERT_TRUE(mine) << "the handed lease was not taken";
  // Handed over, not waited out: the lease was set for the waiter by the release (its
  // token minted then), and taken well before a 30 s lease or its 1.2 s queue place lapsed.
  EXPECT_EQ(std::to_string(mine.fencing_token()),
            redis_command(server.port(), {"GET", keys_of(second).fence()}));
  EXPECT_LT(ready_at - released_at, 1s);
  EXPECT_TRUE(mine.async_release(asio::use_future).get());
  EXPECT_TRUE(clients_become(server.port(), "fleetwaiter:sub", 0));
}

TEST(Waiting, AManagerThatKeepsItsSubscriberConnectionSubscribesOnce) {
  RedisServer server;
  const auto cfg = server.config();
  Background bg;
  LockManager h(bg.io.get_executor(), cfg, {.client_name = "holder"});
  LockManager w(bg.io.get_executor(), cfg,
                {.client_name = "keeper", .keep_subscriber_connection = true});
  for (int i = 0; i < 3; ++i) {
    const auto r = unique_resource();
    auto held = h.async_acquire(r, {.ttl = 30s}, asio::use_future).get();
    ASSERT_TRUE(held);
    auto got = w.async_acquire(r, {.ttl = 30s, .wait = 20s}, asio::use_future);
    ASSERT_TRUE(wait_for_queue(server.port(), r, 1));
    EXPECT_TRUE(held.async_release(asio::use_future).get());
    ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
    auto mine = got.get();
    EXPECT_TRUE(mine);
    EXPECT_TRUE(mine.async_release(asio::use_future).get());
  }
  EXPECT_EQ(clients_named(server.port(), "keeper:sub"), 1);
  const auto stats = redis_command(server.port(), {"INFO", "commandstats"});
  EXPECT_NE(stats.find("cmdstat_subscribe:calls=1,"), std::string::npos) << stats;
}

// ---------------------------------------------------------------------------------------
// Documented behaviour of waiting (README "What a lock on one Redis server guarantees",
// docs/safety.md "Every mode"), one claim each.

TEST(Waiting, DeadWaitersPlaceLapsesWithinTheDocumentedBound) {
  // "A waiter that dies keeps its place for at most 1.2 s": its queue entry's expiry is at
  // most 1.2 s after its death, and once that passed a release skips it and hands the lease
  // to the next live waiter (not to the dead one, whose claim window would hold it 600 ms).
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = keys_of(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  ChildProcess doomed(
      {REDIS_LOCK_WAITER_PATH, std::to_string(cfg.port), resource, "1", "60000", "60000"});
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
  const auto dead_member = redis_command(cfg.port, {"ZRANGE", keys.queue(), "0", "0"});
  auto fut = w.async_acquire(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 2));
  doomed.kill9();  // first in line, and dead
  const auto died = server_ms(cfg.port);
  const auto lapses =
      std::stoll(redis_command(cfg.port, {"ZSCORE", keys.queue_expiry(), dead_member}));
  EXPECT_LE(lapses - died, 1200) << "a dead waiter keeps its place longer than documented";
  server_clock_passes(cfg.port, lapses);
  holder.async_release(asio::use_future).get();
  // The release handed the lease on at once, and not to the dead waiter.
  const auto lease = redis_command(cfg.port, {"GET", keys.lease()});
  // (A lease may carry '+' after the token when more waiters remain: compare the token.)
  EXPECT_NE(lease.substr(0, 32), dead_member.substr(0, 32))
      << "the lease went to a waiter that had died";
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  auto g = fut.get();
  EXPECT_TRUE(g);
}

TEST(Waiting, ArrivalOrderHoldsThroughWaitsLongerThanAQueueEntrysLife) {
  // Waiters keep their place (not just their membership) while they wait longer than an
  // entry's 1.2 s life: each refresh extends the entry, its arrival number stays, and they
  // are served in the order they first asked.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = keys_of(resource);
  Background bg;
  LockManager holder_mgr(bg.io.get_executor(), cfg);
  auto holder = holder_mgr.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  constexpr int n = 4;
  std::vector<std::unique_ptr<LockManager>> managers;
  std::mutex m;
  std::vector<int> order;
  std::promise<void> all_done;
  for (int i = 0; i < n; ++i) {
    managers.push_back(std::make_unique<LockManager>(bg.io.get_executor(), cfg));
    managers.back()->async_acquire(resource, {.ttl = 10s, .wait = 20s},
                                   [&, i](error_code ec, LockGuard g) {
                                     EXPECT_FALSE(ec) << ec.message();
                                     EXPECT_TRUE(g);
                                     std::lock_guard lock(m);
                                     order.push_back(i);
                                     if (order.size() == n) all_done.set_value();
                                   });
    ASSERT_TRUE(wait_for_queue(cfg.port, resource, i + 1)) << "waiter " << i << " never queued";
  }
  const auto queue = redis_command(cfg.port, {"ZRANGE", keys.queue(), "0", "-1", "WITHSCORES"});
  long long first_lapse = 0;
  {
    std::istringstream in(
        redis_command(cfg.port, {"ZRANGE", keys.queue_expiry(), "0", "-1", "WITHSCORES"}));
    std::string member;
    long long score = 0;
    while (in >> member >> score) first_lapse = std::max(first_lapse, score);
  }
  // Two entry lives: every first entry would have lapsed without its refreshes.
  server_clock_passes(cfg.port, first_lapse + 1200);
  EXPECT_EQ(redis_command(cfg.port, {"ZRANGE", keys.queue(), "0", "-1", "WITHSCORES"}), queue)
      << "a waiter lost its place while waiting";
  holder.async_release(asio::use_future).get();
  ASSERT_EQ(all_done.get_future().wait_for(20s), std::future_status::ready);
  std::vector<int> expected(n);
  for (int i = 0; i < n; ++i) expected[i] = i;
  EXPECT_EQ(order, expected);
}

namespace {

/// The commands src/scripts/*.lua call (upper case), and the announcement's PUBLISH or
/// SPUBLISH, which a script calls by a name its channel argument chooses.
std::set<std::string> commands_scripts_call() {
  std::set<std::string> out = {"PUBLISH", "SPUBLISH"};
  const std::regex call(R"(redis\.p?call\('([A-Za-z]+)')");
  for (const auto& file : std::filesystem::directory_iterator(REDIS_LOCK_SCRIPTS_DIR)) {
    std::ifstream in(file.path());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    for (auto it = std::sregex_iterator(text.begin(), text.end(), call);
         it != std::sregex_iterator(); ++it) {
      auto name = (*it)[1].str();
      std::transform(name.begin(), name.end(), name.begin(), ::toupper);
      out.insert(name);
    }
  }
  return out;
}

struct SlowEntry {
  std::string command;            // upper case
  std::string client_name;        // empty: unnamed
  std::vector<std::string> args;  // every word, the command's included (each cut at 128)
};

/// SLOWLOG GET -1, entry by entry: [id, time, duration, [args], address, name].
std::vector<SlowEntry> slow_log(std::uint16_t port) {
  std::vector<SlowEntry> out;
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err) {
    ADD_FAILURE() << "cannot connect to read the slow log";
    if (c != nullptr) redisFree(c);
    return out;
  }
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SLOWLOG GET -1"));
  if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i < reply->elements; ++i) {
      const auto* e = reply->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 6 || e->element[3]->elements == 0) {
        continue;
      }
      std::string command(e->element[3]->element[0]->str, e->element[3]->element[0]->len);
      std::transform(command.begin(), command.end(), command.begin(), ::toupper);
      std::vector<std::string> args;
      for (std::size_t a = 0; a < e->element[3]->elements; ++a) {
        const auto* w = e->element[3]->element[a];
        args.emplace_back(w->str, w->len);
      }
      out.push_back({command, std::string(e->element[5]->str, e->element[5]->len), args});
    }
  }
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(c);
  return out;
}

/// Whether `e` is a call of one of our scripts (either form) by `client`.
bool script_call_of(const SlowEntry& e, const std::string& client) {
  return (e.command == "EVALSHA" || e.command == "FCALL") && e.client_name == client;
}

/// The acquire.lua modes of `client`'s script calls in `entries`, oldest first: its ARGV[3]
/// ('1': an attempt that queues when held, '2': a claim after a hand-off message). A
/// release's ARGV[3] starts with 'P' or 'S' and is left out.
std::vector<char> acquire_modes(const std::vector<SlowEntry>& entries, const std::string& client) {
  std::vector<char> modes;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {  // SLOWLOG: newest first
    const auto& e = *it;
    if (script_call_of(e, client) && e.args.size() > 10 && !e.args[10].empty() &&
        (e.args[10][0] == '1' || e.args[10][0] == '2')) {
      modes.push_back(e.args[10][0]);
    }
  }
  return modes;
}

}  // namespace

TEST(Waiting, AContendedAcquisitionCostsTwoCommands) {
  // README: "Two commands per contended acquisition": the waiter's attempt (it queues) and
  // the holder's release (it hands the lease over, mints the waiter's fencing token and
  // publishes both to the waiter's manager alone, signed with the waiter's secret: the
  // message is the grant, no claim follows). Counted on a private server's slow log, which lists
  // every command a client sends with the client's name. Redis 7.0 leaves out the commands
  // a script runs; Valkey 8 lists them too (before their script's entry): there, the
  // commands our scripts call are left out of the count.
  RedisServer server({"--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000"});
  auto cfg = server.config();
  redis_command(server.port(), {"EVAL", "return redis.call('LASTSAVE')", "0"});
  const auto probe = slow_log(server.port());
  const bool logs_script_commands = std::any_of(
      probe.begin(), probe.end(), [](const auto& e) { return e.command == "LASTSAVE"; });
  const auto script_commands = commands_scripts_call();
  Background bg;
  LockManager h(bg.io.get_executor(), cfg, {.client_name = "holder"});
  // A manager that waits often keeps its subscriber connection (by default it closes when
  // nobody waits, and the next wait subscribes again: Waiting.TheSubscriberConnection...).
  LockManager w(bg.io.get_executor(), cfg,
                {.client_name = "waiter", .keep_subscriber_connection = true});
  const auto contend = [&](const std::string& r) {
    auto held = h.async_acquire(r, {.ttl = 30s}, asio::use_future).get();
    EXPECT_TRUE(held);
    redis_command(server.port(), {"SLOWLOG", "RESET"});
    // Released in the completion handler: the hold is as short as it gets.
    std::promise<std::pair<std::uint64_t, bool>> got;
    w.async_acquire(r, {.ttl = 30s, .wait = 20s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      const auto fence = g.fencing_token();
      g.async_release([&got, fence](error_code rec, bool ok) {
        EXPECT_FALSE(rec);
        got.set_value({fence, ok});
      });
    });
    EXPECT_TRUE(wait_for_queue(server.port(), r, 1));
    // Held a while longer: a waiter that polled would send more meanwhile. (Less than the
    // 400 ms after which a waiter refreshes its place.)
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(held.async_release(asio::use_future).get());
    auto fut = got.get_future();
    EXPECT_EQ(fut.wait_for(10s), std::future_status::ready);
    const auto [fence, released] = fut.get();
    EXPECT_TRUE(released) << "the waiter did not own the lease it was handed";
    // The token the release minted for the waiter: the counter's value.
    EXPECT_EQ(std::to_string(fence), redis_command(server.port(), {"GET", keys_of(r).fence()}));
    return fence;
  };
  // Contended once first: the waiter's manager subscribes once, not per acquisition.
  EXPECT_GT(contend(unique_resource()), 0u);
  EXPECT_GT(contend(unique_resource()), 0u);
  // Each entry ends with the client's address and name; the test's own connection has no
  // name. Count the lock clients' entries.
  const auto log = redis_command(server.port(), {"SLOWLOG", "GET", "-1"});
  const auto entries = slow_log(server.port());
  std::map<std::string, int> by_client;
  for (const auto& entry : entries) {
    if (logs_script_commands && script_commands.count(entry.command) != 0) continue;
    ++by_client[entry.client_name];
  }
  // The attempt and its own release: the signed message granted the lease, no claim
  // (an unsigned one grants nothing: HandOff.AForgedMessageGrantsNothing). A machine slow
  // enough to hold the release past the waiter's refresh (400 ms after its attempt) adds
  // that refresh, which is not what is counted here.
  const auto modes = acquire_modes(entries, "waiter");
  EXPECT_EQ(std::count(modes.begin(), modes.end(), '2'), 0) << "a claim was sent: " << log;
  ASSERT_FALSE(modes.empty()) << log;
  EXPECT_EQ(by_client["waiter"] - static_cast<int>(modes.size() - 1), 2) << log;
  EXPECT_EQ(by_client["holder"], 1) << log;  // the release that handed the lease over
  EXPECT_EQ(by_client["waiter:sub"] + by_client["holder:sub"], 0) << log;
}

TEST(Waiting, AHandedLeaseIsOwnedOnItsSignedMessageForItsTtl) {
  // docs/safety.md "Hand-off": the release sets the lease for the waiter's own ttl and the
  // waiter owns it on the signed message's arrival (it sends nothing more: counted on a
  // private server's slow log); its validity counts from the send time of its last attempt
  // the release saw, so it is never later than the server's expiry, and it is the whole ttl
  // less that wait.
  RedisServer server({"--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000"});
  auto cfg = server.config();
  const auto resource = unique_resource();
  const auto lease = lease_key(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg, {.client_name = "holder"});
  LockManager w(bg.io.get_executor(), cfg,
                {.client_name = "waiter", .keep_subscriber_connection = true});
  {
    // The waiter's manager subscribes with its first wait, and its waiters then look once
    // more (a release may have come before it listened): done here, before the count, and
    // kept (by default a manager closes it when nobody waits).
    const auto other = unique_resource();
    auto held = h.async_acquire(other, {.ttl = 30s}, asio::use_future).get();
    auto first = w.async_acquire(other, {.ttl = 30s, .wait = 20s}, asio::use_future);
    ASSERT_TRUE(wait_for_queue(server.port(), other, 1));
    EXPECT_TRUE(held.async_release(asio::use_future).get());
    ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
    EXPECT_TRUE(first.get().async_release(asio::use_future).get());
  }
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  redis_command(server.port(), {"SLOWLOG", "RESET"});
  auto fut = w.async_acquire(resource, {.ttl = 20s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(server.port(), resource, 1));
  const auto before_release = std::chrono::steady_clock::now();
  EXPECT_TRUE(holder.async_release(asio::use_future).get());
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  auto g = fut.get();
  ASSERT_TRUE(g);
  const auto asked = std::chrono::steady_clock::now();
  const auto pttl = std::stoll(redis_command(server.port(), {"PTTL", lease}));
  EXPECT_GT(pttl, 19'000) << "the release did not hand the lease over for the waiter's ttl";
  EXPECT_LE(pttl, 20'000);
  // The server's expiry is at least `asked + pttl`; the validity must not be later.
  EXPECT_LE(g.valid_until(), asked + std::chrono::milliseconds(pttl) + 1ms)
      << "the waiter counts on more of the handed lease than the server gives it";
  // Dated from the attempt whose place the release saw, sent before the release (not from
  // the message's arrival, after it)...
  EXPECT_LE(g.valid_until(), before_release + 20s - detail::drift_margin(20s))
      << "the lease was dated from after the release";
  // ...and that attempt at most a refresh interval (400 ms) old, with the drift margin.
  EXPECT_GT(g.valid_until() - asked, 19s - 400ms - 202ms - 500ms);
  EXPECT_EQ(without_record(redis_command(server.port(), {"GET", lease})), g.token());
  EXPECT_EQ(std::to_string(g.fencing_token()),
            redis_command(server.port(), {"GET", keys_of(resource).fence()}));
  // The waiter's commands since the reset: the script call of its attempt, which queued it
  // with a secret ('g' after its manager id); the signed message granted, no claim followed.
  const auto log = redis_command(server.port(), {"SLOWLOG", "GET", "-1"});
  const auto entries = slow_log(server.port());
  const auto by_waiter = [](const SlowEntry& e) { return script_call_of(e, "waiter"); };
  const auto waiter_evalshas = std::count_if(entries.begin(), entries.end(), by_waiter);
  // Its attempts ('1': queue when held; a claim would have said '2'): the one that queued it,
  // and its refreshes if the release came 400 ms after it or later (a slow machine).
  const auto modes = acquire_modes(entries, "waiter");
  EXPECT_EQ(std::count(modes.begin(), modes.end(), '2'), 0) << "a claim was sent: " << log;
  EXPECT_EQ(static_cast<std::size_t>(waiter_evalshas), modes.size()) << log;
  ASSERT_FALSE(modes.empty()) << log;
  ASSERT_FALSE(entries.empty());
  const auto queued = std::find_if(entries.begin(), entries.end(), by_waiter);
  ASSERT_NE(queued, entries.end());
  // acquire.lua's member_suffix (ARGV[5]): '<manager id>g<secret><ttl>'.
  ASSERT_GT(queued->args.size(), 12u);
  const auto& suffix = queued->args[12];
  ASSERT_GE(suffix.size(), 16u + 1 + 32);
  EXPECT_EQ(suffix[16], 'g') << suffix;
  EXPECT_EQ(suffix.substr(16 + 1 + 32, 5), "20000") << suffix;
  EXPECT_TRUE(g.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(server.port(), {"EXISTS", lease}), "0");
}

TEST(Waiting, AHandOffMessageNamingAnotherPlaceGrantsNothing) {
  // The waiter owns a handed lease only if the message names the queue place its own last
  // attempt left (the release then ran after that attempt). A message naming another place
  // (a release that saw an older one, whose lease has lapsed since) is a nudge: the waiter
  // looks with an attempt, finds the lock held, and waits on.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = keys_of(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  auto fut = w.async_acquire(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
  const auto member = redis_command(cfg.port, {"ZRANGE", keys.queue(), "0", "0"});
  const auto place = redis_command(cfg.port, {"ZSCORE", keys.queue_expiry(), member});
  const auto channel = "lock:notify:" + member.substr(32, 16);
  const auto stale = std::to_string(std::stoll(place) - 1);
  // The manager subscribes with its first wait, after that first reply.
  wait_until(
      [&] {
        return redis_command(cfg.port, {"PUBSUB", "NUMSUB", channel}) == channel + " 1";
      },
      5s, "the waiter's manager to listen on " + channel);
  EXPECT_EQ(redis_command(cfg.port, {"PUBLISH", channel, member.substr(0, 32) + " 99 " + stale}),
            "1");
  // Its next attempt (at once, nudged; or its refresh) leaves a new place; then it is still
  // waiting, and the holder still holds.
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZSCORE", keys.queue_expiry(), member}) != place;
      },
      5s, "the waiter's next attempt");
  EXPECT_EQ(fut.wait_for(0s), std::future_status::timeout) << "granted by a stale message";
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", keys.lease()})), holder.token() + "+");
  EXPECT_TRUE(holder.async_release(asio::use_future).get());
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  auto g = fut.get();
  ASSERT_TRUE(g);
  EXPECT_NE(g.fencing_token(), 99u);
  EXPECT_EQ(std::to_string(g.fencing_token()), redis_command(cfg.port, {"GET", keys.fence()}));
}

TEST(Waiting, AHandedOverGuardHasTwoThirdsOfItsTtlLeftAtLeast) {
  // The message dates the lease from the waiter's last attempt, which may be a refresh
  // interval (400 ms) old: with a short ttl the waiter then claims it with an attempt
  // instead, so that a guard starts with as much validity as an acquire that took a third
  // of its ttl (what renewal and the CLI count on). Releases at several points of the
  // waiter's 400 ms refresh cycle.
  auto cfg = shared_server_config();
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), w(bg.io.get_executor(), cfg);
  for (const auto delay : {0ms, 100ms, 200ms, 300ms, 370ms}) {
    const auto resource = unique_resource();
    auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
    ASSERT_TRUE(holder);
    std::promise<std::chrono::steady_clock::duration> left;
    w.async_acquire(resource, {.ttl = 600ms, .wait = 20s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      EXPECT_TRUE(g);
      left.set_value(g.valid_until() - std::chrono::steady_clock::now());
    });
    ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
    std::this_thread::sleep_for(delay);  // ages the waiter's last attempt (not a signal)
    EXPECT_TRUE(holder.async_release(asio::use_future).get());
    auto fut = left.get_future();
    ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
    // 400 ms, less what reaching this handler took on a loaded machine.
    EXPECT_GT(fut.get(), 300ms) << "released " << delay.count() << " ms after the waiter queued";
  }
}

TEST(Waiting, AReleaseHandsAnOlderClientsWaiterTheLeaseForItsClaimWindow) {
  // Mixed versions (docs/design-notes.md): a waiter of an older version has a member without
  // a ttl (token + manager id) and claims what it is handed. The release sets its lease for
  // that version's 600 ms claim window and mints nothing (its claim does).
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = keys_of(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg);
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  const std::string old_token(32, 'a');
  const std::string member = old_token + "0123456789abcdef";
  // Queued as that version's acquire.lua queues, marking the lease as this version's does.
  redis_command(cfg.port, {"ZADD", keys.queue(), "1", member});
  redis_command(cfg.port,
                {"ZADD", keys.queue_expiry(), std::to_string(server_ms(cfg.port) + 1200), member});
  redis_command(cfg.port, {"SET", keys.lease(), holder.token() + "+", "PX", "30000"});
  const auto counter = redis_command(cfg.port, {"GET", keys.fence()});
  EXPECT_TRUE(holder.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), old_token);
  const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", keys.lease()}));
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 600);
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.fence()}), counter);
  redis_command(cfg.port, {"DEL", keys.lease()});
}

TEST(Waiting, TheLeaseTellsItsReleaseWhetherAnyoneWaits) {
  // A waiter that queues appends '+' to the holder's lease, keeping its expiry; renewal
  // accepts the marked lease; a hand-off keeps the mark while more waiters remain and drops
  // it for the last one (whose release then deletes without looking at the queue).
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto lease = lease_key(resource);
  Background bg;
  LockManager h(bg.io.get_executor(), cfg), a(bg.io.get_executor(), cfg),
      b(bg.io.get_executor(), cfg);
  auto holder = h.async_acquire(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(holder);
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease})), holder.token());
  auto first = a.async_acquire(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 1));
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease})), holder.token() + "+");
  const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", lease}));
  EXPECT_GT(pttl, 20000) << "marking the lease lost its expiry";
  EXPECT_LE(pttl, 30000) << "marking the lease extended it";
  EXPECT_TRUE(holder.async_extend(40s, asio::use_future).get()) << "a marked lease is still ours";
  EXPECT_GT(std::stoll(redis_command(cfg.port, {"PTTL", lease})), 30000);
  auto second = b.async_acquire(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  ASSERT_TRUE(wait_for_queue(cfg.port, resource, 2));
  EXPECT_TRUE(holder.async_release(asio::use_future).get());
  ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
  auto g1 = first.get();
  ASSERT_TRUE(g1);
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease})), g1.token() + "+")
      << "the hand-off dropped the mark while a waiter remained";
  EXPECT_TRUE(g1.async_release(asio::use_future).get());
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  auto g2 = second.get();
  ASSERT_TRUE(g2);
  EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease})), g2.token());
  EXPECT_TRUE(g2.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease}), "0");
  EXPECT_TRUE(wait_for_queue(cfg.port, resource, 0));
}

// SPDX-License-Identifier: MIT
// Guard and manager lifetimes: destructor release, move-assignment, outliving the manager and
// the io_context, idle means idle, and several threads on one io_context.
#include "live.hpp"
#include "record_initiation.hpp"

#include <boost/asio/use_future.hpp>

#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

class Lifetime : public ::testing::Test {
 protected:
  ConnectionConfig cfg = shared_server_config();
  std::string resource = unique_resource();
  bool exists(const std::string& r) const {
    return redis_command(cfg.port, {"EXISTS", lease_key(r)}) == "1";
  }
};

LockGuard acquire_now(asio::io_context& io, LockManager& locks, const std::string& r,
                      std::chrono::milliseconds ttl = 10s) {
  LockGuard out;
  locks.async_acquire(r, {.ttl = ttl}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    out = std::move(g);
  });
  io.restart();
  io.run_for(5s);
  return out;
}

}  // namespace

TEST_F(Lifetime, DestructorPostsTheRelease) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  {
    LockGuard g = acquire_now(io, locks, resource);
    ASSERT_TRUE(g);
    EXPECT_TRUE(exists(resource));
  }
  EXPECT_TRUE(exists(resource)) << "the destructor must not block: release runs on the executor";
  io.restart();
  io.run_for(5s);
  EXPECT_FALSE(exists(resource));
}

TEST_F(Lifetime, MoveAssignmentReleasesWhatWasHeld) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto other = unique_resource("other");
  LockGuard a = acquire_now(io, locks, resource);
  LockGuard b = acquire_now(io, locks, other);
  ASSERT_TRUE(a && b);
  const auto b_token = b.token();
  a = std::move(b);
  EXPECT_FALSE(b.owns_lock());
  EXPECT_TRUE(b.resource().empty());
  EXPECT_EQ(a.resource(), other);
  EXPECT_EQ(a.token(), b_token);
  io.restart();
  io.run_for(5s);
  EXPECT_FALSE(exists(resource));
  EXPECT_TRUE(exists(other));
  LockGuard moved(std::move(a));
  EXPECT_FALSE(a);
  EXPECT_TRUE(moved);
}

TEST_F(Lifetime, GuardOutlivesItsManager) {
  asio::io_context io;
  auto locks = std::make_unique<LockManager>(io.get_executor(), cfg);
  LockGuard g = acquire_now(io, *locks, resource);
  ASSERT_TRUE(g);
  locks.reset();
  std::optional<bool> released;
  g.async_release([&](error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    released = ok;
  });
  io.restart();
  io.run_for(5s);
  ASSERT_TRUE(released);
  EXPECT_TRUE(*released);
  EXPECT_FALSE(exists(resource));
}

TEST_F(Lifetime, GuardOutlivesItsIoContext) {
  auto io = std::make_unique<asio::io_context>();
  LockGuard g;
  {
    LockManager locks(io->get_executor(), cfg);
    g = acquire_now(*io, locks, resource, 30s);
    ASSERT_TRUE(g);
    // An operation still pending when the context dies is dropped with it.
    locks.async_acquire(unique_resource("pending"), {.ttl = 1s}, [](error_code, LockGuard) {});
  }
  io.reset();  // destroys the context: our service hears of its shutdown
  // Must neither post onto the dead context nor touch its sockets (ASan watches this).
  auto moved = std::move(g);
  moved = LockGuard{};
  // Empty guards that kept the dead context's executor drop their handlers, as Asio drops
  // pending ones (posting onto a destroyed io_context is undefined behaviour).
  bool ran = false;
  g.async_release([&](error_code, bool) { ran = true; });
  moved.async_extend(1s, [&](error_code, bool) { ran = true; });
  moved.async_wait_lost([&](error_code) { ran = true; });
  EXPECT_FALSE(ran);
  EXPECT_TRUE(exists(resource)) << "nothing could run the release: the ttl frees it";
}

TEST_F(Lifetime, AnAutoRenewedGuardIsLostAtItsValidityAlsoOnceItsIoContextIsGone) {
  // lock.hpp: lost() becomes true when an auto-renewed lease reaches valid_until() without a
  // confirmed renewal. Also when nothing can renew it any more (its io_context destroyed):
  // Redis lets the lease go at its ttl, and the guard must not claim it still holds it.
  auto io = std::make_unique<asio::io_context>();
  LockGuard g;
  {
    LockManager locks(io->get_executor(), cfg);
    locks.async_acquire(resource, {.ttl = 1s, .auto_renew = true},
                        [&](error_code ec, LockGuard got) {
                          EXPECT_FALSE(ec) << ec.message();
                          g = std::move(got);
                        });
    const auto limit = std::chrono::steady_clock::now() + 5s;
    while (!g && std::chrono::steady_clock::now() < limit) io->run_one_for(100ms);
    ASSERT_TRUE(g);
  }
  io.reset();
  EXPECT_FALSE(g.lost()) << "lost before its validity ran out";
  const auto until = g.valid_until();
  ASSERT_GT(until, std::chrono::steady_clock::now());
  std::this_thread::sleep_until(until);  // a deadline, not a synchronisation: nothing signals it
  EXPECT_TRUE(g.lost()) << "valid_until() passed without a renewal, yet not lost";
  EXPECT_TRUE(g.owns_lock()) << "owns_lock() stays true until the guard is released (lock.hpp)";
  wait_until([&] { return !exists(resource); }, 5s, "the lease to lapse on the server");
}

TEST_F(Lifetime, UnlaunchedDeferredReleaseStillReleases) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  LockGuard g = acquire_now(io, locks, resource);
  ASSERT_TRUE(g);
  {
    auto op = g.async_release();  // deferred, never launched
    EXPECT_FALSE(g.owns_lock());
  }
  io.restart();
  io.run_for(5s);
  EXPECT_FALSE(exists(resource));
}

// Each operation's initiation reports the executor its completions default to (what
// asio::cancel_after and friends read): the manager's, while the guard holds its lock, after
// it was moved from, and once it is empty again.
TEST_F(Lifetime, InitiationsReportTheManagersExecutor) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const asio::any_io_executor expected = io.get_executor();
  const auto all_report_the_manager = [&](LockGuard& guard) {
    RecordedInitiation release, extend, wait_lost;
    guard.async_release(record_initiation{&release});
    guard.async_extend(1s, record_initiation{&extend});
    guard.async_wait_lost(record_initiation{&wait_lost});
    for (const RecordedInitiation* seen : {&release, &extend, &wait_lost}) {
      if (!seen->executor || !(*seen->executor == expected)) return false;
    }
    return true;
  };

  LockGuard held = acquire_now(io, locks, resource);
  ASSERT_TRUE(held);
  EXPECT_TRUE(all_report_the_manager(held)) << "holding";
  EXPECT_TRUE(held) << "record_initiation starts nothing: the guard keeps its lock";

  LockGuard moved_to(std::move(held));
  EXPECT_TRUE(all_report_the_manager(held)) << "moved from";

  bool released = false;
  moved_to.async_release([&](error_code ec, bool ok) { released = !ec && ok; });
  io.restart();
  io.run_for(5s);
  EXPECT_TRUE(released);
  EXPECT_TRUE(all_report_the_manager(moved_to)) << "released";
  EXPECT_FALSE(exists(resource));
}

TEST_F(Lifetime, IdleManagerLeavesNoWork) { expect_idle_after_one_lock(cfg, resource); }

TEST_F(Lifetime, SeveralThreadsOnOneIoContext) {
  asio::io_context io(4);
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> runners;
  for (int i = 0; i < 4; ++i) runners.emplace_back([&] { io.run_for(60s); });

  LockManager locks(io.get_executor(), cfg);
  const auto shared = unique_resource("shared");
  std::atomic<int> holders{0}, max_holders{0}, errors{0}, taken{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 4; ++t) {
    users.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        const auto own = resource + ":" + std::to_string(t) + ":" + std::to_string(i % 5);
        try {
          auto g = locks.async_acquire(own, {.ttl = 5s}, asio::use_future).get();
          if (!g) ++errors;
          if (!g.async_release(asio::use_future).get()) ++errors;
          // Contended resource: at most one holder at any time across threads.
          auto s = locks.async_acquire(shared, {.ttl = 5s, .wait = 5s}, asio::use_future).get();
          if (!s) {
            ++errors;
            continue;
          }
          const int now = ++holders;
          int prev = max_holders.load();
          while (now > prev && !max_holders.compare_exchange_weak(prev, now)) {
          }
          ++taken;
          // Stay inside a while: a second holder (the bug this looks for) would overlap here.
          std::this_thread::sleep_for(std::chrono::microseconds(300));
          --holders;
          if (!s.async_release(asio::use_future).get()) ++errors;
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
          ++errors;
        }
      }
    });
  }
  for (auto& u : users) u.join();
  work.reset();
  for (auto& r : runners) r.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(taken.load(), 600);
  EXPECT_EQ(max_holders.load(), 1);
}

// SPDX-License-Identifier: MIT
// A graceful end: LockManager::cancel() ends every pending operation with operation_aborted
// and leaves every queue place, and an io_context destroyed while an acquire waits gives its
// place back on its way out, so the next client is served at once, not after the dead
// waiter's ttl.
#include "live.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

class GracefulEnd : public ::testing::Test {
 protected:
  ConnectionConfig cfg = shared_server_config();
  std::string resource = unique_resource();

  // The inspector: a manager of its own on its own io_context, connected once (so that a
  // poll is one round trip, not a connect and a handshake).
  asio::io_context inspector_io;
  LockManager inspector{inspector_io.get_executor(), cfg};

  /// What async_inspect says of `r`, read by the inspector.
  LockInfo inspect(const std::string& r) {
    std::optional<LockInfo> out;
    inspector.async_inspect(r, [&](error_code ec, LockInfo info) {
      EXPECT_FALSE(ec) << ec.message();
      out = std::move(info);
    });
    run_until(
        inspector_io, [&] { return out.has_value(); }, 5s);
    EXPECT_TRUE(out) << "inspect did not complete";
    return out.value_or(LockInfo{});
  }

  /// Polls until `r` has `n` live waiters, for at most `limit`.
  bool waiters_become(const std::string& r, std::size_t n, std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      if (inspect(r).waiters == n) return true;
      std::this_thread::sleep_for(2ms);
    }
    return inspect(r).waiters == n;
  }

  /// A one-try acquire on a manager of its own: owned or not.
  bool one_try(const std::string& r) {
    asio::io_context io;
    LockManager locks(io.get_executor(), cfg);
    return acquire_once(locks, io, r).owned;
  }
};

}  // namespace

TEST_F(GracefulEnd, CancelEndsEveryPendingAcquireAndLeavesItsQueuePlace) {
  asio::io_context io;
  LockManager holder(io.get_executor(), cfg);
  LockManager waiter(io.get_executor(), cfg);
  LockGuard held;
  holder.async_acquire(resource, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec) << ec.message();
    held = std::move(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return held.owns_lock(); }));

  // Four kinds of waiting operation on the waiter's manager: a mutex, a semaphore's permit,
  // a read-write lock's exclusive hold, and several resources at once.
  const auto semaphore = unique_resource("semaphore");
  const auto rw = unique_resource("rw");
  LockGuard permit, shared;
  waiter.async_acquire_permit(semaphore, 1, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec) << ec.message();
    permit = std::move(g);
  });
  holder.async_acquire_shared(rw, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec) << ec.message();
    shared = std::move(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return permit.owns_lock() && shared.owns_lock(); }));
  LockManager other(io.get_executor(), cfg);
  LockGuard other_permit;
  std::vector<error_code> ends(4);
  int ended = 0;
  auto record = [&](int i) {
    return [&, i](error_code ec, auto&&...) {
      ends[static_cast<std::size_t>(i)] = ec;
      ++ended;
    };
  };
  waiter.async_acquire(resource, {.ttl = 5s, .wait = 30s}, record(0));
  other.async_acquire_permit(semaphore, 1, {.ttl = 5s, .wait = 30s}, record(1));
  waiter.async_acquire_exclusive(rw, {.ttl = 5s, .wait = 30s}, record(2));
  waiter.async_acquire_all({unique_resource("free"), resource}, {.ttl = 5s, .wait = 30s},
                           record(3));
  ASSERT_TRUE(run_until(io, [&] {
    return inspect(resource).waiters == 2 && inspect(rw).waiters == 1 &&
           inspect(semaphore).waiters == 1;
  }));

  // Only the waiter's manager is cancelled: the other manager's permit still waits.
  waiter.cancel();
  ASSERT_TRUE(run_until(
      io, [&] { return ended == 3; }, 5s))
      << "cancel() must end them at once";
  EXPECT_EQ(ends[0], asio::error::operation_aborted);
  EXPECT_EQ(ends[2], asio::error::operation_aborted);
  EXPECT_EQ(ends[3], asio::error::operation_aborted);
  // The give-backs were sent before the completions ran; they reach the server in a moment,
  // long before the 800 ms at least that an abandoned place lives on (1.2 s after its last
  // refresh, every 400 ms).
  const auto cancelled_at = Clock::now();
  EXPECT_TRUE(run_until(
      io, [&] { return inspect(resource).waiters == 0; }, 700ms))
      << "the queue places were not left";
  EXPECT_TRUE(run_until(
      io, [&] { return inspect(rw).waiters == 0; }, 700ms));
  EXPECT_LT(Clock::now() - cancelled_at, 700ms);
  EXPECT_EQ(inspect(semaphore).waiters, 1u) << "another manager's wait is not touched";

  // The holder's release now finds nobody queued: the next client is served at once.
  held = LockGuard{};
  ASSERT_TRUE(run_until(
      io, [&] { return !inspect(resource).held; }, 5s));
  EXPECT_TRUE(one_try(resource));

  // The manager works on after cancel(): a new acquire is not cancelled by the earlier call.
  bool taken = false;
  waiter.async_acquire_exclusive(rw, {.ttl = 5s, .wait = 0s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_FALSE(g) << "a shared hold is there: the exclusive one is not taken";
    taken = true;
  });
  ASSERT_TRUE(run_until(io, [&] { return taken; }));
  permit = LockGuard{};
  ASSERT_TRUE(run_until(
      io, [&] { return ended == 4; }, 10s));
  EXPECT_FALSE(ends[1]) << ends[1].message();
}

TEST_F(GracefulEnd, CancelWithNothingPendingDoesNothing) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  locks.cancel();
  const auto got = acquire_once(locks, io, resource);
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_TRUE(got.owned);
}

TEST_F(GracefulEnd, CancelKeepsWhatGuardsHold) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  LockGuard g;
  locks.async_acquire(resource, {.ttl = 10s, .auto_renew = true},
                      [&](error_code, LockGuard got) { g = std::move(got); });
  ASSERT_TRUE(run_until(io, [&] { return g.owns_lock(); }));
  locks.cancel();
  io.restart();
  io.run_for(50ms);
  EXPECT_TRUE(g.owns_lock());
  EXPECT_FALSE(g.lost());
  EXPECT_TRUE(inspect(resource).held) << "a guard's lease is the guard's to release";
}

TEST_F(GracefulEnd, AnIoContextDestroyedWhileAnAcquireWaitsGivesItsPlaceBack) {
  asio::io_context io;
  LockManager holder(io.get_executor(), cfg);
  LockGuard held;
  holder.async_acquire(resource, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec) << ec.message();
    held = std::move(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return held.owns_lock(); }));

  // Another process, as a new user writes it: its io_context on its own thread, stopped and
  // destroyed while its acquire waits in the queue.
  {
    auto waiter_io = std::make_unique<asio::io_context>();
    auto work = asio::make_work_guard(*waiter_io);
    std::thread runner([&] { waiter_io->run(); });
    {
      LockManager waiter(waiter_io->get_executor(), cfg);
      waiter.async_acquire(resource, {.ttl = 5s, .wait = 30s},
                           [](error_code, LockGuard) { ADD_FAILURE() << "never completes"; });
      EXPECT_TRUE(waiters_become(resource, 1, 5s));
    }  // the manager goes first, as locals do
    waiter_io->stop();
    runner.join();
    work.reset();  // before the io_context it counts work on
    waiter_io.reset();
  }
  // Its place was given back as the context went: gone long before the 800 ms at least
  // that an abandoned place lives on (1.2 s after its last refresh, every 400 ms).
  const auto gone_at = Clock::now();
  EXPECT_TRUE(waiters_become(resource, 0, 700ms)) << "the dead waiter's place is still queued";
  EXPECT_LT(Clock::now() - gone_at, 700ms);

  held = LockGuard{};
  ASSERT_TRUE(run_until(
      io, [&] { return !inspect(resource).held; }, 5s));
  const auto released = Clock::now();
  EXPECT_TRUE(one_try(resource)) << "the lease went to a dead waiter's place";
  EXPECT_LT(Clock::now() - released, 1s);
}

TEST_F(GracefulEnd, CancelEndsAnElectionsWaitingCandidateAndItsObserver) {
  asio::io_context io;
  LockManager leader_side(io.get_executor(), cfg);
  LockManager other_side(io.get_executor(), cfg);
  const auto name = unique_resource("election");
  Election leading(leader_side, name);
  Election waiting(other_side, name);
  LockGuard leadership;
  leading.async_campaign("a", {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec) << ec.message();
    leadership = std::move(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return leadership.owns_lock(); }));
  std::optional<error_code> candidate, observer;
  waiting.async_campaign("b", {.ttl = 10s, .wait = 30s},
                         [&](error_code ec, LockGuard) { candidate = ec; });
  // The leader's term: the observer waits for the next one.
  waiting.async_observe(leadership.fencing_token(),
                        [&](error_code ec, std::optional<Leader>) { observer = ec; });
  ASSERT_TRUE(run_until(io, [&] { return inspect("election:" + name).waiters == 1; }));
  other_side.cancel();
  ASSERT_TRUE(run_until(
      io, [&] { return candidate && observer; }, 5s));
  EXPECT_EQ(*candidate, asio::error::operation_aborted);
  EXPECT_EQ(*observer, asio::error::operation_aborted);
  EXPECT_TRUE(run_until(
      io, [&] { return inspect("election:" + name).waiters == 0; }, 700ms));
  EXPECT_TRUE(leadership.owns_lock()) << "the other manager's leader is not touched";
}

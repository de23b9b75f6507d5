// SPDX-License-Identifier: MIT
// with_lock / async_with_lock: work under a lease, work cancelled when the lease is lost.
#include "keys.hpp"
#include "live.hpp"

#include <redis_lock/with_lock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/version.hpp>
#if BOOST_VERSION >= 108600
#include <boost/asio/cancel_after.hpp>
#endif

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(WithLock, RunsTheWorkUnderTheLeaseAndReleases) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  bool ran = false;
  std::optional<error_code> result;
  // Renewed every 100 ms: a renewal may run up to ~500 ms late on a loaded machine.
  async_with_lock(
      locks, resource, {.ttl = 600ms, .renew_every = 100ms},
      [&](const LockGuard& g) -> asio::awaitable<void> {
        EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), g.token());
        asio::steady_timer t(co_await asio::this_coro::executor, 1500ms);
        co_await t.async_wait(asio::use_awaitable);  // longer than the ttl: renewed
        ran = true;
      },
      [&](std::exception_ptr e, error_code ec) {
        EXPECT_FALSE(e);
        result = ec;
      });
  io.run_for(10s);
  ASSERT_TRUE(result);
  EXPECT_FALSE(*result) << result->message();
  EXPECT_TRUE(ran);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(WithLock, LostLeaseCancelsTheWork) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  std::optional<error_code> result;
  bool cancelled = false;
  async_with_lock(
      locks, resource, {.ttl = 600ms},
      [&](const LockGuard&) -> asio::awaitable<void> {
        // Someone else takes the key: the next renewal is refused.
        redis_command(cfg.port, {"SET", lease_key(resource), "intruder", "PX", "30000"});
        co_await sleep_for(30s, cancelled);
      },
      [&](std::exception_ptr e, error_code ec) {
        EXPECT_FALSE(e);
        result = ec;
      });
  io.run_for(10s);
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::lock_lost);
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(redis_command(cfg.port, {"GET", lease_key(resource)}), "intruder");
}

TEST(WithLock, HeldElsewhereDoesNotRunTheWork) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager a(io.get_executor(), cfg), b(io.get_executor(), cfg);
  const auto resource = unique_resource();
  bool ran = false;
  std::optional<error_code> result;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto held = co_await a.async_acquire(resource, {.ttl = 10s}, asio::use_awaitable);
    CO_ASSERT_TRUE(held);
    result = co_await with_lock(b, resource, {.ttl = 1s},
                                [&](const LockGuard&) -> asio::awaitable<void> {
                                  ran = true;
                                  co_return;
                                });
  }());
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::not_acquired);
  EXPECT_FALSE(ran);
}

// The options may be left out before the work: the defaults (a 10 s lease), renewed.
TEST(WithLock, WithoutOptionsTakesTheDefaults) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  int ran = 0;
  const auto work = [&](const LockGuard& g) -> asio::awaitable<void> {
    EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), g.token());
    EXPECT_GT(std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)})), 9000);
    ++ran;
    co_return;
  };
  std::optional<error_code> result;
  run_co(io,
         [&]() -> asio::awaitable<void> { result = co_await with_lock(locks, resource, work); }());
  ASSERT_TRUE(result);
  EXPECT_FALSE(*result) << result->message();

  result.reset();
  async_with_lock(locks, resource, work, [&](std::exception_ptr e, error_code ec) {
    EXPECT_FALSE(e);
    result = ec;
  });
  io.restart();
  io.run_for(10s);
  ASSERT_TRUE(result);
  EXPECT_FALSE(*result) << result->message();
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(WithLock, TheWorksExceptionPropagatesAfterTheRelease) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  std::optional<std::exception_ptr> thrown;
  bool held_while_working = false;
  async_with_lock(
      locks, resource, {.ttl = 5s},
      [&](const LockGuard& g) -> asio::awaitable<void> {
        held_while_working =
            without_record(redis_command(cfg.port, {"GET", lease_key(resource)})) == g.token();
        throw std::runtime_error("work failed");
        co_return;
      },
      [&](std::exception_ptr e, error_code) {
        thrown = e;
        // Released before the exception reached us.
        EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
      });
  io.run_for(10s);
  EXPECT_TRUE(held_while_working);
  ASSERT_TRUE(thrown.has_value()) << "with_lock never completed";
  ASSERT_TRUE(*thrown) << "the work's exception was lost";
  try {
    std::rethrow_exception(*thrown);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "work failed");
  }
}

// with_lock.hpp: "cancelling the coroutine that awaits with_lock cancels the acquire or the
// work, and the lock is released". Cancelled from outside (not by a lost lease) the way
// docs/guide.md suggests: `||` on awaitables, which cancels the loser (cancellation_type::all).
TEST(WithLock, CancelledByOrWhileWaitingOrWorking) {
  using namespace asio::experimental::awaitable_operators;
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg), other(io.get_executor(), cfg);
  const auto resource = unique_resource();
  const auto keys = redis_lock::detail::make_keys("lock:", resource);
  run_co(io, [&]() -> asio::awaitable<void> {
    // Waiting: held elsewhere, the timer wins; the acquire leaves the queue, the work never
    // runs, and nothing is left held when the holder lets go.
    auto held = co_await other.async_acquire(resource, {.ttl = 30s}, asio::use_awaitable);
    CO_ASSERT_TRUE(held.owns_lock());
    bool ran = false;
    auto started = std::chrono::steady_clock::now();
    auto first = co_await (with_lock(locks, resource, {.ttl = 5s, .wait = 20s},
                                     [&](const LockGuard&) -> asio::awaitable<void> {
                                       ran = true;
                                       co_return;
                                     }) ||
                           sleep_for(300ms));
    EXPECT_EQ(first.index(), 1u) << "with_lock completed first";
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s) << "the wait was not cancelled";
    EXPECT_FALSE(ran);
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.queue()}), "0") << "left queued";
    EXPECT_TRUE(co_await held.async_release(asio::use_awaitable));
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0")
        << "the release handed the lease to the cancelled waiter";

    // Working: the work is cancelled, and the lock is released.
    bool aborted = false;
    started = std::chrono::steady_clock::now();
    auto second = co_await (with_lock(locks, resource, {.ttl = 5s},
                                      [&](const LockGuard&) -> asio::awaitable<void> {
                                        co_await sleep_for(20s, aborted);
                                      }) ||
                            sleep_for(300ms));
    EXPECT_EQ(second.index(), 1u);
    EXPECT_TRUE(aborted) << "the work was not cancelled";
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
    for (int i = 0; i < 200 && redis_command(cfg.port, {"EXISTS", lease_key(resource)}) != "0";
         ++i) {
      co_await sleep_for(5ms);
    }
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0") << "not released";
  }());
}

namespace {

/// What an async_with_lock completion said.
struct Completion {
  std::exception_ptr exception;
  error_code ec;
  /// The code the operation ended with: an exception's (the work's, or a co_await's in
  /// with_lock), else the returned error.
  error_code code() const {
    if (!exception) return ec;
    try {
      std::rethrow_exception(exception);
    } catch (const boost::system::system_error& e) {
      return e.code();
    } catch (...) {
      ADD_FAILURE() << "with_lock completed with an exception that is not a system_error";
      return {};
    }
  }
};

/// After a cancelled async_with_lock: the lock is free for another manager, without waiting
/// out the ttl (30 s): the release was sent, not left to the expiry.
void expect_free_at_once(LockManager& other, asio::io_context& io, const std::string& resource) {
  const auto started = std::chrono::steady_clock::now();
  std::optional<Outcome> got;
  // A wait, as the release may still be on its way (with_lock cannot await it once the
  // coroutine is cancelled: the guard's destructor posts it) and races this acquire.
  other.async_acquire(resource, {.ttl = 5s, .wait = 5s}, [&](error_code ec, LockGuard g) {
    got = Outcome{ec, g.owns_lock(), g.fencing_token()};
  });
  ASSERT_TRUE(run_until(
      io, [&] { return got.has_value(); }, 10s))
      << "the other manager's acquire did not complete";
  EXPECT_FALSE(got->ec) << got->ec.message();
  EXPECT_TRUE(got->owned) << "still held after the cancelled with_lock";
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s) << "freed by the ttl, not released";
}

}  // namespace

// docs/guide.md: Asio's per-operation cancellation (`bind_cancellation_slot`, `cancel_after`
// from Boost 1.86 on) cancels with_lock. Here the slot's signal is emitted by a timer on the
// same executor, armed by the work itself (so the work is surely running, not the acquire):
// the work is cancelled, async_with_lock completes with operation_aborted, and the lock is
// released, not left to its 30 s ttl.
TEST(WithLock, CancelledThroughABoundCancellationSlot) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg), other(io.get_executor(), cfg);
  const auto resource = unique_resource();
  asio::cancellation_signal cancel;
  asio::steady_timer emitter(io);
  bool work_started = false, work_aborted = false;
  std::optional<std::chrono::steady_clock::time_point> emitted;
  std::optional<Completion> done;
  async_with_lock(
      locks, resource, {.ttl = 30s},
      [&](const LockGuard& g) -> asio::awaitable<void> {
        work_started = true;
        EXPECT_EQ(without_record(redis_command(cfg.port, {"GET", lease_key(resource)})), g.token());
        emitter.expires_after(100ms);
        emitter.async_wait([&](error_code ec) {
          if (ec) return;
          emitted = std::chrono::steady_clock::now();
          cancel.emit(asio::cancellation_type::terminal);
        });
        co_await sleep_for(20s, work_aborted);
      },
      asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, error_code ec) {
        done = Completion{e, ec};
      }));
  ASSERT_TRUE(run_until(
      io, [&] { return done.has_value(); }, 15s))
      << "async_with_lock did not complete";
  EXPECT_TRUE(work_started);
  EXPECT_TRUE(work_aborted) << "the work was not cancelled";
  ASSERT_TRUE(emitted);
  EXPECT_LT(std::chrono::steady_clock::now() - *emitted, 2s) << "completed long after the cancel";
  EXPECT_EQ(done->code(), asio::error::operation_aborted) << done->code().message();
  expect_free_at_once(other, io, resource);
}

#if BOOST_VERSION >= 108600
// The same with asio::cancel_after, which starts its timer when async_with_lock is called:
// on a slow machine the acquire may still be running when it fires, so either phase may be
// the one cancelled; both end in operation_aborted with nothing left held.
TEST(WithLock, CancelledByCancelAfter) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg), other(io.get_executor(), cfg);
  const auto resource = unique_resource();
  bool work_finished = false;
  std::optional<Completion> done;
  async_with_lock(
      locks, resource, {.ttl = 30s},
      [&](const LockGuard&) -> asio::awaitable<void> {
        co_await sleep_for(20s);
        work_finished = true;
      },
      asio::cancel_after(300ms, [&](std::exception_ptr e, error_code ec) {
        done = Completion{e, ec};
      }));
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(run_until(
      io, [&] { return done.has_value(); }, 15s))
      << "async_with_lock did not complete";
  EXPECT_FALSE(work_finished);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s) << "not cancelled after 300 ms";
  EXPECT_EQ(done->code(), asio::error::operation_aborted) << done->code().message();
  expect_free_at_once(other, io, resource);
}
#endif

TEST(WithLock, PermitsHoldsAndSeveralResources) {
  // with_lock takes every kind: the work runs with what it took, which is released after.
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  const auto semaphore = unique_resource("semaphore");
  const auto rw = unique_resource("rw");
  const std::vector<std::string> several = {unique_resource("a"), unique_resource("b")};
  std::vector<std::string> seen;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto ec = co_await with_lock(locks, Permit{semaphore, 2}, {.ttl = 5s},
                                 [&](const LockGuard& g) -> asio::awaitable<void> {
                                   seen.push_back("permit " + std::to_string(g.owns_lock()));
                                   co_return;
                                 });
    EXPECT_FALSE(ec) << ec.message();
    ec =
        co_await with_lock(locks, SharedHold{rw}, [&](const LockGuard& g) -> asio::awaitable<void> {
          seen.push_back("shared " + std::to_string(g.owns_lock()));
          // A second shared hold at the same time: readers share.
          auto [ec2, other] =
              co_await locks.async_acquire_shared(rw, asio::as_tuple(asio::use_awaitable));
          EXPECT_FALSE(ec2);
          EXPECT_TRUE(other) << "a shared hold excludes another reader";
        });
    EXPECT_FALSE(ec) << ec.message();
    ec = co_await with_lock(
        locks, ExclusiveHold{rw}, {.ttl = 5s}, [&](const LockGuard& g) -> asio::awaitable<void> {
          seen.push_back("exclusive " + std::to_string(g.owns_lock()));
          auto [ec2, reader] =
              co_await locks.async_acquire_shared(rw, asio::as_tuple(asio::use_awaitable));
          EXPECT_FALSE(ec2);
          EXPECT_FALSE(reader) << "the exclusive hold let a reader in";
        });
    EXPECT_FALSE(ec) << ec.message();
    ec = co_await with_lock(locks, AllOf{several}, {.ttl = 5s},
                            [&](const std::vector<LockGuard>& gs) -> asio::awaitable<void> {
                              seen.push_back("all " + std::to_string(gs.size()));
                              co_return;
                            });
    EXPECT_FALSE(ec) << ec.message();
    // Held elsewhere: the work does not run.
    auto [ec3, blocker] =
        co_await locks.async_acquire(several[1], asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(blocker);
    ec = co_await with_lock(locks, AllOf{several},
                            [&](const std::vector<LockGuard>&) -> asio::awaitable<void> {
                              seen.push_back("must not run");
                              co_return;
                            });
    EXPECT_EQ(ec, error::not_acquired);
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"permit 1", "shared 1", "exclusive 1", "all 2"}));
  // Everything was released: all of it can be taken again at once.
  asio::io_context again;
  LockManager other(again.get_executor(), shared_server_config());
  bool taken = false;
  other.async_acquire_exclusive(rw, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec);
    taken = g.owns_lock();
  });
  again.run_for(5s);
  EXPECT_TRUE(taken) << "a hold with_lock took was not released";
}

TEST(WithLock, AsyncWithLockOnAPermit) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  std::optional<error_code> result;
  bool ran = false;
  async_with_lock(
      locks, Permit{unique_resource(), 1}, {.ttl = 5s},
      [&](const LockGuard& g) -> asio::awaitable<void> {
        ran = g.owns_lock();
        co_return;
      },
      [&](std::exception_ptr e, error_code ec) {
        EXPECT_FALSE(e);
        result = ec;
      });
  io.run_for(5s);
  ASSERT_TRUE(result);
  EXPECT_FALSE(*result) << result->message();
  EXPECT_TRUE(ran);
}

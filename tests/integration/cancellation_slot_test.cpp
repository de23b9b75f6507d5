// SPDX-License-Identifier: MIT
// Per-operation cancellation leaves nothing behind: every operation that takes the caller's
// cancellation slot clears it before its completion handler runs, on every path (granted at
// once or after a wait, not acquired, refused before anything is sent, a server error, the
// wait running out, cancelled), as Asio's own operations do; and a signal that outlives the
// io_context is destroyed cleanly also when an operation was dropped at shutdown (ASan
// watches these). docs/architecture.md, "Cancellation slots".
#include "live.hpp"
#include "tcp_proxy.hpp"

#include <redis_lock/with_lock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

/// A completion handler bound to a signal's slot that records whether the slot still held
/// a handler when the completion ran.
struct Probe {
  asio::cancellation_signal signal;
  bool ran = false;
  bool held_at_completion = true;
  error_code ec;

  auto record() {
    return [this](auto first, auto&&...) {
      ran = true;
      held_at_completion = signal.slot().has_handler();
      if constexpr (std::is_same_v<decltype(first), error_code>) ec = first;
    };
  }
  auto handler() { return asio::bind_cancellation_slot(signal.slot(), record()); }
  /// The same, run on `io` (for an operation that completes on the handler's own executor:
  /// without one it would run on a system thread, racing expect_cleared()).
  auto handler_on(asio::io_context& io) {
    return asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, record()));
  }
  /// Runs `io` until the completion ran (10 s at most), then checks the slot.
  void expect_cleared(asio::io_context& io, const std::string& what) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!ran && std::chrono::steady_clock::now() < until) {
      if (io.stopped()) io.restart();  // it ran out of work before this was initiated
      io.run_one_for(100ms);
    }
    EXPECT_TRUE(ran) << what << ": did not complete";
    EXPECT_FALSE(held_at_completion)
        << what << ": the slot still held the handler when it completed";
    EXPECT_FALSE(signal.slot().has_handler()) << what << ": the slot still holds the handler";
  }
};

class CancellationSlot : public ::testing::Test {
 protected:
  ConnectionConfig cfg = shared_server_config();
  asio::io_context io;
  LockManager locks{io.get_executor(), cfg};

  LockGuard hold(const std::string& resource) {
    LockGuard out;
    bool done = false;
    locks.async_acquire(resource, {.ttl = 10s}, [&](error_code, LockGuard g) {
      out = std::move(g);
      done = true;
    });
    while (!done) io.run_one_for(100ms);
    return out;
  }
  /// Runs `fn` on the io_context after `after`.
  void later(std::chrono::milliseconds after, std::function<void()> fn) {
    auto timer = std::make_shared<asio::steady_timer>(io, after);
    timer->async_wait([timer, fn = std::move(fn)](error_code) { fn(); });
  }
};

}  // namespace

TEST_F(CancellationSlot, AcquireClearsItOnEveryPath) {
  const auto resource = unique_resource();
  {
    Probe p;  // granted at once
    locks.async_acquire(resource, {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "granted at once");
  }
  auto held = hold(resource);
  ASSERT_TRUE(held);
  {
    Probe p;  // not acquired: held, one attempt
    locks.async_acquire(resource, {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "not acquired");
  }
  {
    Probe p;  // the wait runs out while queued
    locks.async_acquire(resource, {.ttl = 5s, .wait = 200ms}, p.handler());
    p.expect_cleared(io, "out of wait");
  }
  {
    Probe p;  // cancelled while queued
    locks.async_acquire(resource, {.ttl = 5s, .wait = 10s}, p.handler());
    later(100ms, [&] { p.signal.emit(asio::cancellation_type::terminal); });
    p.expect_cleared(io, "cancelled");
    EXPECT_EQ(p.ec, asio::error::operation_aborted);
  }
  {
    Probe p;  // granted after a wait: the release hands it over
    locks.async_acquire(resource, {.ttl = 5s, .wait = 10s}, p.handler());
    later(100ms, [&] { held.async_release([](error_code, bool) {}); });
    p.expect_cleared(io, "granted after a wait");
    EXPECT_FALSE(p.ec) << p.ec.message();
  }
  {
    Probe p;  // refused before anything is sent
    locks.async_acquire("", {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "refused");
    EXPECT_EQ(p.ec, error::invalid_argument);
  }
}

TEST_F(CancellationSlot, AnErrorClearsIt) {
  ConnectionConfig nowhere = cfg;
  nowhere.port = free_port();
  LockManager unreachable(io.get_executor(), nowhere);
  Probe p;
  unreachable.async_acquire(unique_resource(), {.ttl = 5s}, p.handler());
  p.expect_cleared(io, "connect failed");
  EXPECT_TRUE(p.ec);
}

TEST_F(CancellationSlot, LeaseSetsAcquireAllCampaignObserveAndWithLockClearIt) {
  {
    Probe p;
    locks.async_acquire_permit(unique_resource(), 2, {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "permit");
  }
  {
    Probe p;
    locks.async_acquire_shared(unique_resource(), {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "shared");
  }
  {
    Probe p;
    locks.async_acquire_exclusive(unique_resource(), {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "exclusive");
  }
  {
    Probe p;
    locks.async_acquire_all({unique_resource("a"), unique_resource("b")}, {.ttl = 5s}, p.handler());
    p.expect_cleared(io, "acquire_all");
  }
  {
    const auto taken = unique_resource("taken");
    auto held = hold(taken);
    Probe p;  // cancelled while it waits for the held one
    locks.async_acquire_all({unique_resource("free"), taken}, {.ttl = 5s, .wait = 10s},
                            p.handler());
    later(100ms, [&] { p.signal.emit(asio::cancellation_type::terminal); });
    p.expect_cleared(io, "acquire_all cancelled");
  }
  Election election(locks, unique_resource("election"));
  LockGuard leadership;
  {
    Probe p;
    election.async_campaign(
        "me", {.ttl = 5s},
        asio::bind_cancellation_slot(p.signal.slot(), [&](error_code ec, LockGuard g) {
          p.ran = true;
          p.held_at_completion = p.signal.slot().has_handler();
          p.ec = ec;
          leadership = std::move(g);
        }));
    p.expect_cleared(io, "campaign");
    ASSERT_TRUE(leadership);
  }
  {
    Probe p;  // the leader is there: answered at once
    election.async_observe(0, p.handler());
    p.expect_cleared(io, "observe");
  }
  {
    Probe p;  // waits for a change that does not come: cancelled
    election.async_observe(leadership.fencing_token(), p.handler());
    later(100ms, [&] { p.signal.emit(asio::cancellation_type::terminal); });
    p.expect_cleared(io, "observe cancelled");
  }
  {
    Probe p;
    async_with_lock(
        locks, unique_resource("work"), {.ttl = 5s},
        [](const LockGuard&) -> asio::awaitable<void> { co_return; }, p.handler());
    p.expect_cleared(io, "async_with_lock");
  }
}

TEST_F(CancellationSlot, OneCommandOperationsAndWaitLostClearIt) {
  // Completed by their reply (or, for wait_lost, by the release), not cancelled: nothing may
  // be left in the slot either (a coroutine's use_awaitable always carries one).
  const auto resource = unique_resource();
  auto held = hold(resource);
  ASSERT_TRUE(held);
  {
    Probe p;
    locks.async_inspect(resource, p.handler());
    p.expect_cleared(io, "inspect");
  }
  {
    Probe p;
    held.async_extend(5s, p.handler());
    p.expect_cleared(io, "extend");
  }
  {
    Probe p;  // refused before anything is sent
    held.async_extend(0ms, p.handler());
    p.expect_cleared(io, "extend refused");
    EXPECT_EQ(p.ec, error::invalid_argument);
  }
  {
    Probe p;  // ended by the release below
    held.async_wait_lost(p.handler());
    Probe r;
    held.async_release(r.handler());
    r.expect_cleared(io, "release");
    p.expect_cleared(io, "wait_lost");
  }
  {
    Probe p;  // an empty guard: completes without touching Redis
    LockGuard empty;
    empty.async_release(p.handler_on(io));
    p.expect_cleared(io, "release of an empty guard");
  }
  {
    Probe p;
    locks.async_force_release(resource, p.handler());
    p.expect_cleared(io, "force_release");
  }
  {
    Probe p;
    Election election(locks, unique_resource("election"));
    election.async_leader(p.handler());
    p.expect_cleared(io, "leader");
  }
  {
    Probe p;  // a moved-from manager refuses
    LockManager moved_to(std::move(locks));
    locks.async_acquire(resource, {.ttl = 5s}, p.handler_on(io));
    p.expect_cleared(io, "moved-from manager");
    EXPECT_EQ(p.ec, error::invalid_argument);
  }
}

TEST(CancellationSlotOneCommand, ReleaseExtendInspectForceReleaseAndLeaderEndAtOnceWhenCancelled) {
  // Behind a link that delivers every reply 400 ms late: each operation is cancelled at
  // once and must complete with operation_aborted then, not when its reply comes. What the
  // command does on the server still happens (a cancelled release releases, or the lease
  // expires by itself: docs say so).
  TcpProxy slow(shared_server_port());
  ConnectionConfig cfg = shared_server_config();
  cfg.port = slow.port();
  cfg.command_timeout = 5s;
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  LockGuard held;
  locks.async_acquire(resource, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    ASSERT_FALSE(ec) << ec.message();
    held = std::move(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return held.owns_lock(); }));
  slow.set_delay(400ms);
  auto cancelled_at_once = [&](const std::string& what, auto initiate) {
    Probe p;
    initiate(p);
    io.poll();  // the initiation reaches the strand; the command is on its way
    const auto emitted = std::chrono::steady_clock::now();
    p.signal.emit(asio::cancellation_type::terminal);
    p.expect_cleared(io, what);
    EXPECT_EQ(p.ec, asio::error::operation_aborted) << what << ": " << p.ec.message();
    EXPECT_LT(std::chrono::steady_clock::now() - emitted, 300ms)
        << what << ": completed with its reply, not at the cancellation";
  };
  cancelled_at_once("inspect", [&](Probe& p) { locks.async_inspect(resource, p.handler()); });
  cancelled_at_once("extend", [&](Probe& p) { held.async_extend(10s, p.handler()); });
  cancelled_at_once("leader", [&](Probe& p) {
    Election election(locks, unique_resource("election"));
    election.async_leader(p.handler());
  });
  cancelled_at_once("force_release of another resource", [&](Probe& p) {
    locks.async_force_release(unique_resource("other"), p.handler());
  });
  cancelled_at_once("release", [&](Probe& p) { held.async_release(p.handler()); });
  EXPECT_FALSE(held.owns_lock());
  // The release ran on all the same: the lease is gone once its reply is due.
  slow.set_delay(0ms);
  EXPECT_TRUE(run_until(
      io,
      [&] {
        return redis_command(shared_server_port(), {"EXISTS", lease_key(resource)}) == "0";
      },
      5s))
      << "the cancelled release did not release";
}

TEST(CancellationSlotLifetime, ASignalOutlivingTheIoContextIsDestroyedCleanly) {
  // The reproduction of the report: the signal is declared first, so it is destroyed after
  // the io_context. Once with an operation that completed, once with one still waiting when
  // the io_context went (dropped, never completed: its handler stays in the slot, and must
  // hold nothing of the dead context).
  const auto cfg = shared_server_config();
  const auto resource = unique_resource();
  asio::cancellation_signal done_signal, dropped_signal;
  {
    asio::io_context io;
    LockManager locks(io.get_executor(), cfg);
    LockGuard held;
    locks.async_acquire(
        resource, {.ttl = 2s},
        asio::bind_cancellation_slot(done_signal.slot(),
                                     [&](error_code, LockGuard g) { held = std::move(g); }));
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!held && std::chrono::steady_clock::now() < until) io.run_one_for(100ms);
    ASSERT_TRUE(held);
    EXPECT_FALSE(done_signal.slot().has_handler());
    locks.async_acquire(
        resource, {.ttl = 2s, .wait = 30s},
        asio::bind_cancellation_slot(dropped_signal.slot(), [](error_code, LockGuard) {
          ADD_FAILURE() << "a dropped operation completed";
        }));
    io.run_for(200ms);  // queued behind `held`
  }
  // The io_context is gone; destroying the signals (end of scope) must touch none of it.
  // An emit finds the manager gone and does nothing.
  dropped_signal.emit(asio::cancellation_type::terminal);
}

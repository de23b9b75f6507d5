// SPDX-License-Identifier: MIT
// The observer hooks report what happened: acquires by outcome (with contention, attempts and
// latency), releases, extensions, renewals and lost leases, with errors by kind.
#include "live.hpp"
#include "tcp_proxy.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <mutex>
#include <optional>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

struct Recorder final : Observer {
  struct Acquire {
    std::string resource;
    AcquireOutcome outcome;
    error_code error;
    std::chrono::steady_clock::duration latency;
    int attempts;
    bool waited;
    std::uint64_t fence;
  };
  struct Lease {
    std::string resource;
    LeaseCommand command;
    bool succeeded;
    error_code error;
  };
  void on_acquire(const AcquireEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    acquires.push_back({std::string(e.resource), e.outcome, e.error, e.latency, e.attempts,
                        e.waited, e.fencing_token});
  }
  void on_lease(const LeaseEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    leases.push_back({std::string(e.resource), e.command, e.succeeded, e.error});
  }
  void on_lost(std::string_view resource) noexcept override {
    std::lock_guard lock(mutex);
    lost.emplace_back(resource);
  }
  int count(LeaseCommand c, bool succeeded) {
    std::lock_guard lock(mutex);
    return static_cast<int>(std::count_if(leases.begin(), leases.end(), [&](const Lease& l) {
      return l.command == c && l.succeeded == succeeded;
    }));
  }
  std::mutex mutex;
  std::vector<Acquire> acquires;
  std::vector<Lease> leases;
  std::vector<std::string> lost;
};

}  // namespace

TEST(Observer, AcquireOutcomesAndLeaseCommands) {
  asio::io_context io;
  auto rec = std::make_shared<Recorder>();
  LockManager locks(io.get_executor(), shared_server_config(), {.observer = rec});
  LockManager other(io.get_executor(), shared_server_config());  // not observed
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    auto busy = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    EXPECT_FALSE(busy);
    EXPECT_TRUE(co_await g.async_extend(10s, asio::use_awaitable));
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
    // Contention with waiting: `other` holds it for a moment.
    auto held = co_await other.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(held);
    asio::steady_timer later(co_await asio::this_coro::executor, 50ms);
    later.async_wait([&](error_code) { held.async_release(asio::detached); });
    auto waited =
        co_await locks.async_acquire(resource, {.ttl = 5s, .wait = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(waited);
    // A lease that expired before its release: released = false.
    auto brief =
        co_await locks.async_acquire(resource + "-brief", {.ttl = 20ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(brief);
    co_await sleep_for(60ms);
    EXPECT_FALSE(co_await brief.async_release(asio::use_awaitable));
    // Bad input is reported as a failure too.
    auto [ec, none] = co_await locks.async_acquire("", {}, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::invalid_argument);
    {
      auto dropped = std::move(waited);  // released by its destructor: reported as well
    }
    co_await sleep_for(50ms);
  });
  std::lock_guard lock(rec->mutex);
  ASSERT_EQ(rec->acquires.size(), 5u);
  const auto& first = rec->acquires[0];
  EXPECT_EQ(first.resource, resource);
  EXPECT_EQ(first.outcome, AcquireOutcome::acquired);
  EXPECT_EQ(first.attempts, 1);
  EXPECT_FALSE(first.waited);
  EXPECT_GT(first.fence, 0u);
  EXPECT_GT(first.latency, std::chrono::steady_clock::duration::zero());
  EXPECT_EQ(rec->acquires[1].outcome, AcquireOutcome::not_acquired);
  EXPECT_EQ(rec->acquires[1].fence, 0u);
  EXPECT_EQ(rec->acquires[2].outcome, AcquireOutcome::acquired);
  EXPECT_TRUE(rec->acquires[2].waited);
  EXPECT_GE(rec->acquires[2].attempts, 2);
  EXPECT_GE(rec->acquires[2].latency, 40ms);
  EXPECT_EQ(rec->acquires[3].outcome, AcquireOutcome::acquired);
  EXPECT_EQ(rec->acquires[4].outcome, AcquireOutcome::failed);
  EXPECT_EQ(rec->acquires[4].error, error::invalid_argument);
  // extend, release, release of the expired lease, the destructor's release; nothing from
  // the unobserved manager and no clean-up releases.
  ASSERT_EQ(rec->leases.size(), 4u);
  EXPECT_EQ(rec->leases[0].command, LeaseCommand::extend);
  EXPECT_TRUE(rec->leases[0].succeeded);
  EXPECT_EQ(rec->leases[1].command, LeaseCommand::release);
  EXPECT_TRUE(rec->leases[1].succeeded);
  EXPECT_EQ(rec->leases[2].resource, resource + "-brief");
  EXPECT_FALSE(rec->leases[2].succeeded);
  EXPECT_FALSE(rec->leases[2].error);
  EXPECT_EQ(rec->leases[3].command, LeaseCommand::release);
  EXPECT_TRUE(rec->leases[3].succeeded);
  EXPECT_TRUE(rec->lost.empty());
}

TEST(Observer, RenewalsAndALostLease) {
  asio::io_context io;
  auto rec = std::make_shared<Recorder>();
  LockManager locks(io.get_executor(), shared_server_config(), {.observer = rec});
  const auto resource = unique_resource();
  const auto port = shared_server_port();
  run_co(io, [&]() -> asio::awaitable<void> {
    // Renewed every 50 ms; the 600 ms ttl lets a loaded machine run a renewal late.
    auto g = co_await locks.async_acquire(
        resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 50ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    // Until three renewals were reported (bounded).
    for (const auto until = std::chrono::steady_clock::now() + 5s;
         rec->count(LeaseCommand::renewal, true) < 3 && std::chrono::steady_clock::now() < until;) {
      co_await sleep_for(10ms);
    }
    EXPECT_FALSE(g.lost());
    EXPECT_GE(rec->count(LeaseCommand::renewal, true), 3);
    // Someone deletes the lease behind our back: the next renewal finds it gone.
    redis_command(port, {"DEL", lease_key(resource)});
    auto [ec] = co_await g.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::lock_lost);
  });
  EXPECT_EQ(rec->count(LeaseCommand::renewal, false), 1);
  std::lock_guard lock(rec->mutex);
  ASSERT_EQ(rec->lost.size(), 1u);
  EXPECT_EQ(rec->lost[0], resource);
}

namespace {

/// Every LeaseEvent, with its latency and error.
struct LeaseLog final : Observer {
  std::mutex mutex;
  std::vector<LeaseEvent> events;  // (views cleared)
  void on_lease(const LeaseEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    events.push_back(e);
    events.back().resource = {};
    events.back().nodes = {};
  }
  std::vector<LeaseEvent> of(LeaseCommand c) {
    std::lock_guard lock(mutex);
    std::vector<LeaseEvent> out;
    for (const auto& e : events) {
      if (e.command == c) out.push_back(e);
    }
    return out;
  }
};

}  // namespace

TEST(Observer, LeaseEventsCarryLatencyAndErrors) {
  // observer.hpp: LeaseEvent::latency is "from sending to the reply" and LeaseEvent::error
  // says that "the command failed (no answer, server error)". Behind a proxy that adds
  // 100 ms each way, then answers nothing (command timeout 400 ms).
  RedisServer server;
  TcpProxy proxy(server.port());
  auto cfg = server.config();
  cfg.port = proxy.port();
  cfg.command_timeout = 400ms;
  asio::io_context io;
  auto log = std::make_shared<LeaseLog>();
  LockManager locks(io.get_executor(), cfg, {.observer = log});
  const auto at_least = [](const LeaseEvent& e, std::chrono::milliseconds low) {
    return e.latency >= low && e.latency < low + 1s;
  };
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(unique_resource(), {.ttl = 1200ms, .auto_renew = true},
                                          asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    proxy.set_delay(100ms);
    co_await sleep_for(900ms);  // two renewals (every 400 ms), 200 ms round trips
    auto [ec, ok] = co_await g.async_extend(1200ms, asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(ok) << ec.message();
    const auto renewals = log->of(LeaseCommand::renewal);
    CO_ASSERT_TRUE(!renewals.empty());
    for (const auto& e : renewals) {
      EXPECT_TRUE(e.succeeded);
      EXPECT_FALSE(e.error) << e.error.message();
    }
    EXPECT_TRUE(at_least(renewals.back(), 200ms))
        << std::chrono::duration_cast<std::chrono::milliseconds>(renewals.back().latency).count();
    const auto extends = log->of(LeaseCommand::extend);
    CO_ASSERT_TRUE(extends.size() == 1u);
    EXPECT_TRUE(extends[0].succeeded);
    EXPECT_FALSE(extends[0].error);
    EXPECT_TRUE(at_least(extends[0], 200ms))
        << std::chrono::duration_cast<std::chrono::milliseconds>(extends[0].latency).count();

    // No answer: the extension, the renewals and the release fail with `timeout`, each
    // after the command timeout.
    proxy.set_blackhole(true);
    auto [ec2, ok2] = co_await g.async_extend(1200ms, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec2, error::timeout) << ec2.message();
    EXPECT_FALSE(ok2);
    const auto failed = log->of(LeaseCommand::extend);
    CO_ASSERT_TRUE(failed.size() == 2u);
    EXPECT_FALSE(failed[1].succeeded);
    EXPECT_EQ(failed[1].error, error::timeout) << failed[1].error.message();
    EXPECT_TRUE(at_least(failed[1], 400ms))
        << std::chrono::duration_cast<std::chrono::milliseconds>(failed[1].latency).count();
    auto [ec3] = co_await g.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec3, error::lock_lost);
    const auto late = log->of(LeaseCommand::renewal);
    EXPECT_FALSE(late.back().succeeded);
    EXPECT_TRUE(late.back().error) << "a renewal without an answer reported no error";
  }());
}

TEST(Observer, AnExtensionOrATouchRefusedBeforeAnythingIsSentIsALeaseEventWithItsRule) {
  // An acquire refused by a rule is an AcquireEvent (failed, its rule as the detail); an
  // extension or a touch refused the same way was heard of by nobody but its caller.
  RedisServer server;
  asio::io_context io;
  auto log = std::make_shared<LeaseLog>();
  std::vector<std::string> details;
  struct Details final : Observer {
    std::shared_ptr<LeaseLog> inner;
    std::vector<std::string>* out;
    void on_lease(const LeaseEvent& e) noexcept override {
      out->emplace_back(e.detail);
      inner->on_lease(e);
    }
  };
  auto observer = std::make_shared<Details>();
  observer->inner = log;
  observer->out = &details;
  LockManager locks(io.get_executor(), server.config(), {.observer = observer});
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(unique_resource(), {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    auto [ec, ok] = co_await g.async_extend(0ms, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::invalid_argument);
    auto [ec2, ok2] = co_await g.async_touch("a\nline", asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec2, error::invalid_argument);
    co_await g.async_release(asio::use_awaitable);
    EXPECT_FALSE(ok || ok2);
  }());
  const auto extends = log->of(LeaseCommand::extend);
  ASSERT_EQ(extends.size(), 1u);
  EXPECT_FALSE(extends[0].succeeded);
  EXPECT_EQ(extends[0].error, error::invalid_argument);
  const auto touches = log->of(LeaseCommand::touch);
  ASSERT_EQ(touches.size(), 1u);
  EXPECT_FALSE(touches[0].succeeded);
  EXPECT_EQ(touches[0].error, error::invalid_argument);
  ASSERT_EQ(details.size(), 3u) << "the extension, the touch and the release";
  EXPECT_NE(details[0].find("ttl"), std::string::npos) << details[0];
  EXPECT_NE(details[1].find("label"), std::string::npos) << details[1];
  EXPECT_EQ(log->of(LeaseCommand::release).size(), 1u);
}

namespace {

/// What a metrics observer keeps: acquires waiting and leases held now, by kind, from
/// on_wait / on_acquire / on_hold_end alone.
struct Tally final : Observer {
  static constexpr int kinds = 5;
  std::mutex mutex;
  int waiting[kinds] = {};
  int held[kinds] = {};
  int acquired = 0;
  std::vector<HoldEvent> ends;  // (views cleared)
  std::vector<std::string> ended;

  void on_wait(const WaitEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    ++waiting[static_cast<int>(e.kind)];
  }
  void on_acquire(const AcquireEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    if (e.waited) --waiting[static_cast<int>(e.kind)];
    if (e.outcome == AcquireOutcome::acquired) {
      ++held[static_cast<int>(e.kind)];
      ++acquired;
    }
  }
  void on_hold_end(const HoldEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    --held[static_cast<int>(e.kind)];
    ended.emplace_back(e.resource);
    ends.push_back(e);
    ends.back().resource = {};
  }
  int waiting_now(AcquireKind k) {
    std::lock_guard lock(mutex);
    return waiting[static_cast<int>(k)];
  }
  int held_now(AcquireKind k) {
    std::lock_guard lock(mutex);
    return held[static_cast<int>(k)];
  }
};

/// Polls (on the io_context) until `done()` or 5 s.
asio::awaitable<bool> eventually(std::function<bool()> done) {
  for (const auto until = std::chrono::steady_clock::now() + 5s;
       std::chrono::steady_clock::now() < until;) {
    if (done()) co_return true;
    co_await sleep_for(5ms);
  }
  co_return done();
}

}  // namespace

TEST(Observer, WaitsAndHoldsPairUpForGauges) {
  // A gauge of acquires waiting and one of leases held, kept from the events alone, read
  // what is true at each step and come back to zero: every wait is followed by its
  // acquire's event, every acquired lease by one end of its hold (released or lost, not
  // both), whatever the kind and however it ends.
  asio::io_context io;
  auto tally = std::make_shared<Tally>();
  LockManager locks(io.get_executor(), shared_server_config(), {.observer = tally});
  LockManager other(io.get_executor(), shared_server_config());  // not observed
  const auto resource = unique_resource();
  const auto port = shared_server_port();
  using K = AcquireKind;
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        // A mutex held for 30 ms, released.
        auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
        CO_ASSERT_TRUE(g);
        EXPECT_EQ(tally->held_now(K::mutex), 1);
        co_await sleep_for(30ms);
        EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
        CO_ASSERT_TRUE(co_await eventually([&] { return tally->held_now(K::mutex) == 0; }));

        // Waiting: counted while it waits, and not once it has the lease.
        auto theirs = co_await other.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
        CO_ASSERT_TRUE(theirs);
        auto waiter = locks.async_acquire(resource, {.ttl = 5s, .wait = 5s},
                                          asio::as_tuple(asio::use_awaitable));
        auto ex = co_await asio::this_coro::executor;
        std::optional<LockGuard> got;
        asio::co_spawn(ex, std::move(waiter), [&](std::exception_ptr, auto result) {
          got.emplace(std::move(std::get<1>(result)));
        });
        CO_ASSERT_TRUE(co_await eventually([&] { return tally->waiting_now(K::mutex) == 1; }));
        EXPECT_FALSE(got.has_value());
        EXPECT_TRUE(co_await theirs.async_release(asio::use_awaitable));
        CO_ASSERT_TRUE(co_await eventually([&] { return got.has_value(); }));
        EXPECT_TRUE(*got);
        EXPECT_EQ(tally->waiting_now(K::mutex), 0);
        EXPECT_EQ(tally->held_now(K::mutex), 1);
        got.reset();  // dropped: its destructor's release ends the hold
        CO_ASSERT_TRUE(co_await eventually([&] { return tally->held_now(K::mutex) == 0; }));

        // A wait that runs out, and one cancelled: both leave the gauge.
        theirs = co_await other.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
        CO_ASSERT_TRUE(theirs);
        auto [ec1, none1] = co_await locks.async_acquire(resource, {.ttl = 5s, .wait = 100ms},
                                                         asio::as_tuple(asio::use_awaitable));
        EXPECT_FALSE(ec1);
        EXPECT_FALSE(none1);
        EXPECT_EQ(tally->waiting_now(K::mutex), 0);
        asio::cancellation_signal cancel;
        bool cancelled = false;
        locks.async_acquire(
            resource, {.ttl = 5s, .wait = 5s},
            asio::bind_cancellation_slot(cancel.slot(), [&](error_code e, LockGuard) {
              cancelled = e == asio::error::operation_aborted;
            }));
        CO_ASSERT_TRUE(co_await eventually([&] { return tally->waiting_now(K::mutex) == 1; }));
        cancel.emit(asio::cancellation_type::terminal);
        CO_ASSERT_TRUE(co_await eventually([&] { return cancelled; }));
        EXPECT_EQ(tally->waiting_now(K::mutex), 0);
        EXPECT_TRUE(co_await theirs.async_release(asio::use_awaitable));

        // Every kind, each reported as itself.
        auto permit = co_await locks.async_acquire_permit(resource + "-sem", 2, {.ttl = 5s},
                                                          asio::use_awaitable);
        auto shared =
            co_await locks.async_acquire_shared(resource + "-rw", {.ttl = 5s}, asio::use_awaitable);
        Election election(locks, resource + "-election");
        auto leader = co_await election.async_campaign("me", {.ttl = 5s}, asio::use_awaitable);
        std::vector<std::string> two;  // (no braced list in a coroutine: GCC 12 rejects it)
        two.push_back(resource + "-a");
        two.push_back(resource + "-b");
        auto both =
            co_await locks.async_acquire_all(std::move(two), {.ttl = 5s}, asio::use_awaitable);
        CO_ASSERT_TRUE(permit && shared && leader && both.size() == 2u);
        EXPECT_EQ(tally->held_now(K::permit), 1);
        EXPECT_EQ(tally->held_now(K::shared), 1);
        EXPECT_EQ(tally->held_now(K::election), 1);
        EXPECT_EQ(tally->held_now(K::mutex), 2);
        EXPECT_TRUE(co_await shared.async_release(asio::use_awaitable));
        auto exclusive = co_await locks.async_acquire_exclusive(resource + "-rw", {.ttl = 5s},
                                                                asio::use_awaitable);
        CO_ASSERT_TRUE(exclusive);
        EXPECT_EQ(tally->held_now(K::exclusive), 1);
        {
          auto gone = std::move(permit);
          auto gone2 = std::move(exclusive);
          auto gone3 = std::move(leader);
          auto gone4 = std::move(both);
        }
        CO_ASSERT_TRUE(co_await eventually([&] {
          return tally->held_now(K::permit) == 0 && tally->held_now(K::exclusive) == 0 &&
                 tally->held_now(K::election) == 0 && tally->held_now(K::mutex) == 0;
        }));

        // Not renewed, taken away behind its back: the extension finds it gone, a loss.
        auto plain =
            co_await locks.async_acquire(resource + "-plain", {.ttl = 5s}, asio::use_awaitable);
        CO_ASSERT_TRUE(plain);
        redis_command(port, {"DEL", lease_key(resource + "-plain")});
        EXPECT_FALSE(co_await plain.async_extend(5s, asio::use_awaitable));
        EXPECT_EQ(tally->held_now(K::mutex), 0) << "the failed extension's loss ended the hold";
        { auto gone = std::move(plain); }

        // Lost while held: its end is the loss, and dropping the guard later adds none.
        auto renewed = co_await locks.async_acquire(
            resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 50ms}, asio::use_awaitable);
        CO_ASSERT_TRUE(renewed);
        redis_command(port, {"DEL", lease_key(resource)});
        auto [lost] = co_await renewed.async_wait_lost(asio::as_tuple(asio::use_awaitable));
        EXPECT_EQ(lost, error::lock_lost);
        EXPECT_EQ(tally->held_now(K::mutex), 0) << "the loss ended the hold";
        { auto gone = std::move(renewed); }
        co_await sleep_for(50ms);  // a second end, had the drop made one, would be in by now
      }(),
      15s);
  std::lock_guard lock(tally->mutex);
  for (int k = 0; k < Tally::kinds; ++k) {
    EXPECT_EQ(tally->waiting[k], 0) << "kind " << k;
    EXPECT_EQ(tally->held[k], 0) << "kind " << k;
  }
  EXPECT_EQ(static_cast<int>(tally->ends.size()), tally->acquired);
  ASSERT_FALSE(tally->ends.empty());
  EXPECT_EQ(tally->ends.front().end, HoldEnd::released);
  EXPECT_GE(tally->ends.front().held_for, 30ms);
  EXPECT_EQ(tally->ends.back().end, HoldEnd::lost);
  EXPECT_EQ(tally->ended.back(), resource);
  const auto lost_ends = std::count_if(tally->ends.begin(), tally->ends.end(),
                                       [](const HoldEvent& e) { return e.end == HoldEnd::lost; });
  EXPECT_EQ(lost_ends, 2);
}

// SPDX-License-Identifier: MIT
// A multi-threaded io_context under load, for TSan: four threads run one io_context; three
// managers share it; sixteen coroutine loops on strands of their own take a contended lock,
// waiting, some auto-renewed, and cancel some acquires from their own strand at random
// moments — while other threads run the manager's internals.
#include "live.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <random>
#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(Stress, ThreadsCancellationsAndRenewalsOnOneIoContext) {
  asio::io_context io(4);
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> runners;
  for (int i = 0; i < 4; ++i) runners.emplace_back([&] { io.run_for(90s); });

  std::vector<std::unique_ptr<LockManager>> managers;
  for (int i = 0; i < 3; ++i) {
    managers.push_back(std::make_unique<LockManager>(io.get_executor(), shared_server_config()));
  }
  const auto shared = unique_resource("shared");
  std::atomic<int> holders{0}, max_holders{0}, acquired{0}, cancelled{0}, failed{0}, done{0};
  constexpr int loops = 16, rounds = 40;

  const auto loop = [&](int id) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;  // this loop's strand
    std::minstd_rand rng(static_cast<unsigned>(id));
    auto& locks = *managers[static_cast<std::size_t>(id) % managers.size()];
    for (int round = 0; round < rounds; ++round) {
      // Every third acquire is cancelled after 0-3 ms, from this strand (as Asio requires:
      // a signal is emitted where its operation's handler runs).
      asio::cancellation_signal signal;
      asio::steady_timer canceller(ex, std::chrono::microseconds(rng() % 3000));
      const bool cancel = round % 3 == 0;
      if (cancel) {
        canceller.async_wait([&signal](error_code ec) {
          if (!ec) signal.emit(asio::cancellation_type::terminal);
        });
      }
      // Renewed every 30 ms: several renewals per hold, while a loaded 2-core machine under
      // TSan may stall a renewal for most of the 300 ms ttl without losing the lease.
      const bool renew = round % 4 == 1;
      auto [ec, guard] = co_await locks.async_acquire(
          shared,
          {.ttl = renew ? 300ms : 2s,
           .wait = 5s,
           .auto_renew = renew,
           .renew_every = renew ? 30ms : 0ms},
          asio::bind_cancellation_slot(signal.slot(), asio::as_tuple(asio::use_awaitable)));
      canceller.cancel();
      if (ec == asio::error::operation_aborted) {
        ++cancelled;
        continue;
      }
      if (ec || !guard) {
        ++failed;
        continue;
      }
      ++acquired;
      const int now = ++holders;
      int prev = max_holders.load();
      while (now > prev && !max_holders.compare_exchange_weak(prev, now)) {
      }
      // A renewed one is held until a renewal was confirmed (within 2 s), the others 1 ms.
      const auto first_valid_until = guard.valid_until();
      const auto hold_until = std::chrono::steady_clock::now() + 2s;
      asio::steady_timer hold(ex);
      do {
        hold.expires_after(renew ? 10ms : 1ms);
        co_await hold.async_wait(asio::as_tuple(asio::use_awaitable));
      } while (renew && guard.valid_until() == first_valid_until && !guard.lost() &&
               std::chrono::steady_clock::now() < hold_until);
      if (guard.lost() || (renew && guard.valid_until() == first_valid_until)) ++failed;
      --holders;
      if (round % 2) {
        co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
      }  // else the destructor posts the release
    }
    ++done;
  };
  for (int i = 0; i < loops; ++i) {
    asio::co_spawn(asio::make_strand(io), loop(i), [&](std::exception_ptr e) {
      if (e) ++failed;
    });
  }
  const auto until = std::chrono::steady_clock::now() + 80s;
  while (done.load() < loops && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  managers.clear();
  work.reset();
  for (auto& r : runners) r.join();
  std::printf("[ stress   ] %d acquired, %d cancelled, %d failed\n", acquired.load(),
              cancelled.load(), failed.load());
  EXPECT_EQ(done.load(), loops);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_EQ(acquired.load() + cancelled.load(), loops * rounds);
  EXPECT_GT(cancelled.load(), 0);
}

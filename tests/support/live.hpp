// SPDX-License-Identifier: MIT
// Helpers for live tests: bounded runs of an io_context and of coroutines.
#pragma once

#include "redis_server.hpp"

#include <redis_lock/redis_lock.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <thread>

namespace redis_lock::test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// A resource name no other test (or earlier run) uses.
inline std::string unique_resource(std::string_view base = "") {
  static std::atomic<unsigned> counter{0};
  static const unsigned run = std::random_device{}();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "t";
  return name + ":" + std::string(base) + ":" + std::to_string(run) + ":" +
         std::to_string(counter++);
}

/// Runs `co` on `io` for at most `limit`; fails the test if it did not finish in time and
/// rethrows what it threw.
template <class Awaitable>
void run_co(asio::io_context& io, Awaitable co, std::chrono::milliseconds limit = 10s) {
  bool done = false;
  std::exception_ptr failure;
  asio::co_spawn(io, std::move(co), [&](std::exception_ptr e) {
    done = true;
    failure = e;
  });
  io.restart();
  io.run_for(limit);
  ASSERT_TRUE(done) << "coroutine did not finish within " << limit.count() << " ms";
  if (failure) std::rethrow_exception(failure);
}

/// In a coroutine: waits `d` on the coroutine's executor.
inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

/// In a coroutine: waits `d`; when the wait is cancelled (operation_aborted), sets `aborted`
/// first, then rethrows, so a test can tell its work was cancelled and not just ended.
inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d, bool& aborted) {
  try {
    co_await sleep_for(d);
  } catch (const boost::system::system_error& e) {
    aborted = e.code() == asio::error::operation_aborted;
    throw;
  }
}

/// Runs `io` on this thread, one handler at a time, until `done()` holds or `limit` has
/// passed (work still pending then, late replies say, stays for the test); returns `done()`.
template <class Done>
bool run_until(asio::io_context& io, Done done,
               std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  io.restart();
  while (!done() && std::chrono::steady_clock::now() < until) {
    io.run_one_for(std::chrono::milliseconds(10));
    if (io.stopped()) io.restart();
  }
  return done();
}

/// What one acquire came back with (the guard is released when the test moves on).
struct Outcome {
  boost::system::error_code ec;
  bool owned = false;
  std::uint64_t fence = 0;
};

/// One acquire (its guard's release posted afterwards), run to completion within `limit`.
inline Outcome acquire_once(LockManager& locks, asio::io_context& io, const std::string& resource,
                            std::chrono::milliseconds limit = 10s) {
  std::optional<Outcome> out;
  locks.async_acquire(resource, {.ttl = 5s}, [&](boost::system::error_code ec, LockGuard g) {
    out = Outcome{ec, g.owns_lock(), g.fencing_token()};
  });
  io.restart();
  io.run_for(limit);
  EXPECT_TRUE(out) << "acquire did not complete";
  return out.value_or(Outcome{error::timeout});
}

/// "Idle means idle": one acquire and release, then io_context::run_for must return at once
/// because the manager left nothing pending (no timer, no read).
inline void expect_idle_after_one_lock(const ConnectionConfig& cfg, const std::string& resource) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  int done = 0;
  locks.async_acquire(resource, {.ttl = 5s}, [&](boost::system::error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    g.async_release([&](boost::system::error_code, bool ok) {
      EXPECT_TRUE(ok);
      ++done;
    });
  });
  const auto start = std::chrono::steady_clock::now();
  io.run_for(10s);  // returns as soon as nothing is pending
  EXPECT_EQ(done, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s)
      << "a timer or read stayed armed after the work was done";
  EXPECT_TRUE(io.stopped());
}

/// Polls the replica (there is no signal) until its link to the master is up, within 10 s.
inline bool wait_until_linked(const RedisServer& replica) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    if (replica.command({"INFO", "replication"}).find("master_link_status:up") !=
        std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

/// The lease key of `resource` under the default prefix.
inline std::string lease_key(std::string_view resource) {
  return "lock:{" + std::string(resource) + "}";
}

/// A mutex lease's value without the holder's record folded into it: '<token> <data>@<fencing
/// token>[+]' reads as '<token>[+]' (the form of a lease handed over and not yet claimed, and
/// of a Redlock lease); any other value as it is.
inline std::string without_record(const std::string& value) {
  if (value.size() <= 32 || value[32] != ' ') return value;
  return value.substr(0, 32) + (value.back() == '+' ? "+" : "");
}

}  // namespace redis_lock::test

/// ASSERT_TRUE for coroutines (gtest's ASSERT_* use `return`, which a coroutine cannot).
#define CO_ASSERT_TRUE(cond)                       \
  do {                                             \
    if (!(cond)) {                                 \
      ADD_FAILURE() << "assertion failed: " #cond; \
      co_return;                                   \
    }                                              \
  } while (0)

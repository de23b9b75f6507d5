// SPDX-License-Identifier: MIT
// README.md's C++ blocks, run against a live server: each test checks what the README says
// its block does. The whole program (readme_coroutine.cpp) is built as is and run as a child
// process; the fragments are wrapped here in functions that provide what they use (`locks`,
// and the reader's own functions such as build_report, as test doubles that record calls).
#include "snippets.hpp"

#include "child_process.hpp"

#include <redis_lock/redis_lock.hpp>
#include <redis_lock/with_lock.hpp>

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace redis_lock::test;
using boost::system::error_code;

namespace {

const std::string report = "report:daily";  // the resource the README's fragments lock

// ---- "With callbacks" ----------------------------------------------------------------------
namespace readme_callbacks {

std::vector<error_code> errors;           // log_error
std::vector<std::uint64_t> reports;       // build_report
std::vector<std::string> warnings;        // log_warning
std::function<void()> while_reporting;    // what happens meanwhile (e.g. the lease expires)

void log_error(error_code ec) { errors.push_back(ec); }
void log_warning(const char* text) { warnings.emplace_back(text); }
void build_report(std::uint64_t fencing_token) {
  reports.push_back(fencing_token);
  if (while_reporting) while_reporting();
}

void start(redis_lock::LockManager& locks) {
  //[readme_callbacks
  locks.async_acquire("report:daily", {.ttl = 30s},
      [&](boost::system::error_code ec, redis_lock::LockGuard guard) {
        if (ec) return log_error(ec);          // Redis unreachable, timeout, server error...
        if (!guard) return;                     // another node is building the report
        build_report(guard.fencing_token());
        guard.async_release([](boost::system::error_code release_ec, bool released) {
          // released == false: the lease had expired (the ttl was too short for the work)
          if (!release_ec && !released) log_warning("report:daily: the lease had expired");
        });
      });
  //]
}

}  // namespace readme_callbacks

// ---- "Waiting, renewal, and work that must stop when the lock is lost" ---------------------
namespace readme_with_lock {

std::vector<std::uint64_t> reports;
bool taken_over = false;  // someone else takes the lease while the report is being built
bool cancelled = false;   // ... and the work was cancelled

asio::awaitable<void> build_report(std::uint64_t fencing_token) {
  reports.push_back(fencing_token);
  if (!taken_over) co_return;
  asio::steady_timer long_work(co_await asio::this_coro::executor, 30s);
  try {
    co_await long_work.async_wait(asio::use_awaitable);
  } catch (const boost::system::system_error& e) {
    cancelled = e.code() == asio::error::operation_aborted;
    throw;
  }
}

asio::awaitable<error_code> daily_report(redis_lock::LockManager& locks) {
  // The #include is a no-op here (the header is included above); the README shows it.
  //[readme_with_lock
  #include <redis_lock/with_lock.hpp>   // coroutine helpers, not in the umbrella header

  // Wait up to 2 s for the lock (fair FIFO), renew it every 2 s (ttl/3) while the work runs.
  auto ec = co_await redis_lock::with_lock(locks, "report:daily", {.ttl = 6s, .wait = 2s},
      [&](const redis_lock::LockGuard& g) -> asio::awaitable<void> {
        co_await build_report(g.fencing_token());   // cancelled if the lease is lost
      });
  if (ec == redis_lock::error::not_acquired) { /* someone else did it */ }
  if (ec == redis_lock::error::lock_lost)    { /* the work did not finish under the lease */ }
  //]
  co_return ec;
}

}  // namespace readme_with_lock

// ---- "Beyond one server" --------------------------------------------------------------------
namespace readme_topologies {

struct Configs {
  redis_lock::ConnectionConfig cluster, sentinel, redlock;
};

Configs make(asio::io_context& io) {
  //[readme_topologies
  auto cluster = redis_lock::ConnectionConfig::from_url(
      "redis+cluster://10.0.0.1:7000,10.0.0.2:7000").value();  // throws if malformed
  auto sentinel = redis_lock::ConnectionConfig::from_url(
      "redis+sentinel://:data-pw@10.0.0.5:26379,10.0.0.6:26379/locks?sentinel_password=s-pw")
      .value();
  auto redlock = redis_lock::ConnectionConfig::from_url(
      "redis+redlock://m1:6379,m2:6379,m3:6379,m4:6379,m5:6379").value();
  redis_lock::LockManager locks(io.get_executor(), cluster);
  //]
  return {cluster, sentinel, redlock};
}

}  // namespace readme_topologies

/// Runs `program args...` with its stderr joined to its stdout (and no core file); returns
/// the exit status (-1 when killed by a signal) and the output.
std::pair<int, std::string> run_program(const std::string& program, const std::string& arg) {
  ChildProcess child({"/bin/sh", "-c", "ulimit -c 0; exec \"$0\" \"$1\" 2>&1", program, arg});
  std::string output;
  for (std::string line = child.read_line(); !line.empty(); line = child.read_line()) {
    output += line + "\n";
  }
  return {child.wait(), output};
}

class Readme : public Snippet {
 protected:
  void SetUp() override {
    Snippet::SetUp();
    readme_callbacks::errors.clear();
    readme_callbacks::reports.clear();
    readme_callbacks::warnings.clear();
    readme_callbacks::while_reporting = nullptr;
    readme_with_lock::reports.clear();
    readme_with_lock::taken_over = readme_with_lock::cancelled = false;
  }
  asio::io_context io;
};

}  // namespace

// "With coroutines": the program takes the lock on order 42, charges, releases, says 200.
TEST_F(Readme, CoroutineProgramChargesUnderTheLock) {
  const auto [status, output] = run_program(REDIS_LOCK_SNIPPET_COROUTINE, url());
  EXPECT_EQ(status, 0) << output;
  EXPECT_TRUE(output.starts_with("charging order 42, fencing token ")) << output;
  EXPECT_TRUE(output.ends_with("\ncheckout: 200\n")) << output;
  EXPECT_EQ(command({"EXISTS", lease_key("order:42")}), "0") << "not released";
}

// "held elsewhere: not an error": 409, and nothing charged.
TEST_F(Readme, CoroutineProgramAnswers409WhenHeldElsewhere) {
  hold_elsewhere("order:42");
  const auto [status, output] = run_program(REDIS_LOCK_SNIPPET_COROUTINE, url());
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "checkout: 409\n");
}

// "a malformed URL: check before using it": refused before anything else, saying why.
TEST_F(Readme, CoroutineProgramRefusesAMalformedUrl) {
  const auto [status, output] = run_program(REDIS_LOCK_SNIPPET_COROUTINE, "redis://127.0.0.1:port");
  EXPECT_EQ(status, 2) << output;
  EXPECT_EQ(output, "bad URL: port is not a number\n");
}

// "e.g. Redis unreachable: loud, not silent": the error ends the program, and says what it is.
TEST_F(Readme, CoroutineProgramIsLoudWhenRedisIsDown) {
  const auto [status, output] = run_program(REDIS_LOCK_SNIPPET_COROUTINE, down_url());
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find(make_error_code(redis_lock::error::connect_failed).message()),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("checkout:"), std::string::npos) << output;
}

TEST_F(Readme, CallbacksBuildTheReportUnderTheLock) {
  redis_lock::LockManager locks(io.get_executor(), config());
  readme_callbacks::while_reporting = [&] {
    EXPECT_EQ(command({"EXISTS", lease_key(report)}), "1") << "built without the lock";
  };
  readme_callbacks::start(locks);
  io.run_for(10s);
  ASSERT_EQ(readme_callbacks::reports.size(), 1u);
  EXPECT_GT(readme_callbacks::reports[0], 0u);
  EXPECT_TRUE(readme_callbacks::errors.empty());
  EXPECT_TRUE(readme_callbacks::warnings.empty());
  EXPECT_EQ(command({"EXISTS", lease_key(report)}), "0") << "not released";
}

// "another node is building the report": no report, no error.
TEST_F(Readme, CallbacksSkipTheReportWhenHeldElsewhere) {
  hold_elsewhere(report);
  redis_lock::LockManager locks(io.get_executor(), config());
  readme_callbacks::start(locks);
  io.run_for(10s);
  EXPECT_TRUE(readme_callbacks::reports.empty());
  EXPECT_TRUE(readme_callbacks::errors.empty());
}

// "released == false: the lease had expired (the ttl was too short for the work)".
TEST_F(Readme, CallbacksHearWhenTheLeaseExpiredBeforeTheRelease) {
  redis_lock::LockManager locks(io.get_executor(), config());
  readme_callbacks::while_reporting = [&] {  // the work outlasts the lease
    command({"PEXPIRE", lease_key(report), "1"});
    wait_until([&] { return command({"EXISTS", lease_key(report)}) == "0"; }, 5s,
               "the lease to expire");
  };
  readme_callbacks::start(locks);
  io.run_for(10s);
  EXPECT_EQ(readme_callbacks::reports.size(), 1u);
  EXPECT_EQ(readme_callbacks::warnings, std::vector<std::string>{"report:daily: the lease had expired"});
}

// "Redis unreachable, timeout, server error...": the error reaches log_error.
TEST_F(Readme, CallbacksLogTheErrorWhenRedisIsDown) {
  redis_lock::LockManager locks(io.get_executor(),
                                redis_lock::ConnectionConfig::from_url(down_url()).value());
  readme_callbacks::start(locks);
  io.run_for(10s);
  EXPECT_EQ(readme_callbacks::errors, std::vector<error_code>{redis_lock::error::connect_failed});
  EXPECT_TRUE(readme_callbacks::reports.empty());
}

TEST_F(Readme, WithLockRunsTheWorkUnderTheLease) {
  redis_lock::LockManager locks(io.get_executor(), config());
  std::optional<error_code> ec;
  run_co(io, [&]() -> asio::awaitable<void> { ec = co_await readme_with_lock::daily_report(locks); }());
  ASSERT_TRUE(ec);
  EXPECT_FALSE(*ec) << ec->message();
  ASSERT_EQ(readme_with_lock::reports.size(), 1u);
  EXPECT_GT(readme_with_lock::reports[0], 0u);
  EXPECT_EQ(command({"EXISTS", lease_key(report)}), "0") << "not released";
}

// "Wait up to 2 s for the lock": a holder that lets go within the wait hands it over.
TEST_F(Readme, WithLockWaitsForTheHolder) {
  redis_lock::LockManager locks(io.get_executor(), config()), holder(io.get_executor(), config());
  std::optional<error_code> ec;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto held = co_await holder.async_acquire(report, asio::use_awaitable);
    CO_ASSERT_TRUE(held);
    asio::co_spawn(io, [&held]() -> asio::awaitable<void> {
      co_await sleep_for(300ms);
      co_await held.async_release(asio::use_awaitable);
    }, asio::detached);
    ec = co_await readme_with_lock::daily_report(locks);
  }());
  ASSERT_TRUE(ec);
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(readme_with_lock::reports.size(), 1u);
}

// "someone else did it": held for the whole wait, the work does not run.
TEST_F(Readme, WithLockIsNotAcquiredWhenHeldForTheWholeWait) {
  hold_elsewhere(report);
  redis_lock::LockManager locks(io.get_executor(), config());
  std::optional<error_code> ec;
  const auto start = std::chrono::steady_clock::now();
  run_co(io, [&]() -> asio::awaitable<void> { ec = co_await readme_with_lock::daily_report(locks); }());
  ASSERT_TRUE(ec);
  EXPECT_EQ(*ec, redis_lock::error::not_acquired);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1900ms) << "did not wait 2 s";
  EXPECT_TRUE(readme_with_lock::reports.empty());
}

// "cancelled if the lease is lost" and "the work did not finish under the lease": someone
// else takes the key; the next renewal (every 2 s) finds out, and the work is cancelled.
TEST_F(Readme, WithLockCancelsTheWorkWhenTheLeaseIsLost) {
  readme_with_lock::taken_over = true;
  redis_lock::LockManager locks(io.get_executor(), config());
  std::optional<error_code> ec;
  const auto start = std::chrono::steady_clock::now();
  run_co(io, [&]() -> asio::awaitable<void> {
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      while (readme_with_lock::reports.empty()) co_await sleep_for(5ms);
      command({"SET", lease_key(report), "someone-else", "PX", "30000"});
    }, asio::detached);
    ec = co_await readme_with_lock::daily_report(locks);
  }(), 20s);
  ASSERT_TRUE(ec);
  EXPECT_EQ(*ec, redis_lock::error::lock_lost);
  EXPECT_TRUE(readme_with_lock::cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s) << "noticed only at the ttl";
}

// "only the configuration changes": each URL parses to its topology; a manager is made
// without connecting (the addresses are examples; the topologies have their own live tests).
TEST_F(Readme, TopologiesAreConfigurations) {
  const auto configs = readme_topologies::make(io);
  EXPECT_EQ(configs.cluster.topology, redis_lock::Topology::cluster);
  EXPECT_EQ(configs.cluster.nodes.size(), 2u);
  EXPECT_EQ(configs.sentinel.topology, redis_lock::Topology::sentinel);
  EXPECT_EQ(configs.sentinel.sentinel_master, "locks");
  EXPECT_EQ(configs.sentinel.password, "data-pw");
  EXPECT_EQ(configs.sentinel.sentinel_password, "s-pw");
  EXPECT_EQ(configs.sentinel.nodes.size(), 2u);
  EXPECT_EQ(configs.redlock.topology, redis_lock::Topology::redlock);
  EXPECT_EQ(configs.redlock.nodes.size(), 5u);
  io.run();  // returns at once: nothing was sent
}

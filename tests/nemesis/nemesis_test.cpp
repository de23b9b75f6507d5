// SPDX-License-Identifier: MIT
// The nemesis suite (issue 51): worker processes on the public API (nemesis_worker.cpp), each
// behind a TCP proxy of its own, take one lock in turn and write their fencing tokens to a
// fenced register on an independent server, while a schedule of real faults runs: a worker's
// path frozen, every path slowed, a worker paused (SIGSTOP), the lock server killed with
// SIGKILL and restarted without persistence, FLUSHALL, its wall clock stepped forward and
// back (the clock shim). Then a checker reads the merged history (history.cpp) and holds it
// to docs/safety.md. Longer on demand: REDIS_LOCK_NEMESIS_SECONDS (the schedule repeats).
#include "history.hpp"

#include "child_process.hpp"
#include "clock_file.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include "redis_lock_scripts.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

namespace redis_lock::nemesis {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::RedisServer;
using test::TcpProxy;

constexpr int workers = 4;
constexpr auto ttl = 1000ms;

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}

/// One run: servers, proxies, workers and the faults; the histories they wrote.
struct Schedule {
  test::ClockFile clock;
  std::unique_ptr<RedisServer> lock_server, register_server;
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  std::vector<std::unique_ptr<ChildProcess>> children;
  std::vector<std::string> files;
  std::vector<Fault> faults;

  Schedule() {
    clock.with_shim(REDIS_LOCK_CLOCK_SHIM, [&] { lock_server = std::make_unique<RedisServer>(); });
    register_server = std::make_unique<RedisServer>();
  }

  void start(int seconds, const std::string& tag) {
    for (int i = 0; i < workers; ++i) {
      proxies.push_back(std::make_unique<TcpProxy>(lock_server->port()));
      files.push_back(::testing::TempDir() + "nemesis-" + tag + "-" + std::to_string(i) + ".log");
      children.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          REDIS_LOCK_NEMESIS_WORKER, std::to_string(proxies.back()->port()),
          std::to_string(register_server->port()), "nemesis", std::to_string(ttl.count()),
          std::to_string(seconds), files.back()}));
    }
  }

  /// A fault from now for `length`, then healed by `heal` (recorded with both times).
  template <class Make, class Heal>
  void fault(FaultKind kind, int target, std::chrono::milliseconds length, Make make, Heal heal) {
    Fault f{kind, target, now_ns(), 0};
    make();
    std::this_thread::sleep_for(length);
    heal();
    f.healed = now_ns();
    faults.push_back(f);
  }

  void step_clock(std::int64_t ms) {
    if (clock.cell() != nullptr) clock.cell()->fetch_add(ms);
  }

  /// The schedule, once (about 18 s), each fault healed before the next, with a quiet
  /// second and a half after each.
  void schedule() {
    const auto quiet = [] { std::this_thread::sleep_for(1500ms); };
    quiet();
    fault(
        FaultKind::partition, 0, 1500ms, [&] { proxies[0]->set_blackhole(true); },
        [&] { proxies[0]->set_blackhole(false); });
    quiet();
    fault(
        FaultKind::delay, -1, 2000ms,
        [&] {
          for (auto& p : proxies) p->set_delay(150ms);
        },
        [&] {
          for (auto& p : proxies) p->set_delay(0ms);
        });
    quiet();
    fault(
        FaultKind::pause, 1, 1500ms, [&] { children[1]->signal(SIGSTOP); },
        [&] { children[1]->signal(SIGCONT); });
    quiet();
    fault(
        FaultKind::restart, -1, 300ms, [&] { lock_server->kill(SIGKILL); },
        [&] { clock.with_shim(REDIS_LOCK_CLOCK_SHIM, [&] { lock_server->restart(); }); });
    quiet();
    fault(
        FaultKind::flushall, -1, 0ms, [&] { lock_server->command({"FLUSHALL"}); }, [] {});
    quiet();
    fault(
        FaultKind::clock_forward, -1, 0ms, [&] { step_clock(2000); }, [] {});
    quiet();
    fault(
        FaultKind::clock_back, -1, 0ms, [&] { step_clock(-2000); }, [] {});
    quiet();
  }

  /// Waits for every worker's last line ('done'), `limit` at most; a worker still running
  /// then is killed and named as hung.
  std::vector<std::string> finish(std::chrono::seconds limit) {
    std::vector<std::string> hung;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (std::size_t i = 0; i < children.size(); ++i) {
      while (read_file(files[i]).find(" done\n") == std::string::npos &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(50ms);
      }
      if (read_file(files[i]).find(" done\n") == std::string::npos) {
        hung.push_back("worker " + std::to_string(i));
        children[i]->kill9();
      } else {
        children[i]->wait();
      }
    }
    return hung;
  }

  static std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::vector<std::string> histories() const {
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back(read_file(f));
    return out;
  }
};

/// The functions library with a planted bug: the mint without its clock floor (a lost
/// counter starts again from 1), as fencing tokens were minted before they were floored.
std::string library_without_clock_floor() {
  std::string text(detail::function_library);
  for (const char* from :
       {"if not fresh_only and minted ~= fence then", "if not fresh_only or f == 1 then"}) {
    const auto at = text.find(from);
    if (at == std::string::npos) return {};
    text.replace(at, std::string_view(from).size(), "if false then");
  }
  return text;
}

TEST(Nemesis, StandaloneKeepsEveryPromiseThroughItsFaults) {
  const int rounds =
      std::max(1, static_cast<int>(env_number("REDIS_LOCK_NEMESIS_SECONDS", 0) / 18));
  Schedule run;
  const int seconds = rounds * 18 + 2;
  run.start(seconds, "standalone");
  for (int i = 0; i < rounds; ++i) run.schedule();
  const auto hung = run.finish(std::chrono::seconds(seconds + 30));
  EXPECT_TRUE(hung.empty()) << "hung: " << hung.front();
  const auto report = check(run.histories(), run.faults, ttl);
  std::cout << report.table();
  EXPECT_GT(report.acquisitions, 40) << "the workers hardly ran";
  EXPECT_TRUE(report.violations.empty()) << report.violations.front();
}

TEST(Nemesis, FindsThePlantedMintWithoutItsClockFloor) {
  // The server runs a functions library whose mint is a bare INCR (the library finds it
  // loaded under its own name and calls it): a FLUSHALL then restarts the tokens from 1.
  const auto planted = library_without_clock_floor();
  ASSERT_FALSE(planted.empty()) << "the planted bug no longer matches the mint";
  Schedule run;
  ASSERT_EQ(run.lock_server->command({"FUNCTION", "LOAD", planted}).rfind("redis_lock_", 0), 0u);
  run.start(8, "planted");
  std::this_thread::sleep_for(3s);
  run.fault(
      FaultKind::flushall, -1, 0ms, [&] { run.lock_server->command({"FLUSHALL"}); }, [] {});
  const auto hung = run.finish(40s);
  EXPECT_TRUE(hung.empty());
  const auto report = check(run.histories(), run.faults, ttl);
  std::cout << report.table();
  ASSERT_FALSE(report.violations.empty()) << "the planted bug was not found";
  std::cout << "[nemesis] planted mint without its clock floor found: " << report.violations.front()
            << "\n";
  EXPECT_NE(report.violations.front().find("TOKEN_ORDER"), std::string::npos)
      << report.violations.front();
}

}  // namespace
}  // namespace redis_lock::nemesis

// SPDX-License-Identifier: MIT
// The fault matrix: a steady load of lock traffic (8 loops over 3 resources, each taking,
// holding and releasing) while a real fault hits the server or the path to it. For every
// fault the same four checks:
//   1. every operation completed exactly once (success or a clear error);
//   2. nothing took longer than its deadlines allow;
//   3. no lease outlived its ttl once the load stopped;
//   4. mutual exclusion: no two holders' validity windows on one resource overlapped
//      (except where the fault loses the server's data, which no lock survives: noted).
#include "live.hpp"
#include "tcp_proxy.hpp"
#include "tls_material.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto command_timeout = 300ms;
constexpr auto connect_timeout = 300ms;
constexpr LockOptions load_options{.ttl = 600ms, .wait = 200ms};
// Longest an acquire may take: its wait, a connect, a command, retries' jitter, and slack
// for a loaded 2-core machine running sanitizers.
constexpr auto latency_bound = 2500ms;

/// Lock loops on a thread of their own, recording what happened.
class LockLoad {
 public:
  LockLoad(ConnectionConfig cfg, std::vector<std::string> resources, int loops)
      : locks_(io_.get_executor(), with_timeouts(std::move(cfg))),
        resources_(std::move(resources)) {
    for (int i = 0; i < loops; ++i) {
      asio::co_spawn(io_, loop(i), [this](std::exception_ptr e) {
        if (e) {
          std::lock_guard lock(mutex_);
          ++loop_failures_;
        }
      });
    }
    thread_ = std::thread([this] { io_.run_for(60s); });
  }
  ~LockLoad() { stop(); }

  /// Ends the loops after their current operation; returns once every loop has ended.
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }

  struct Window {
    Clock::time_point from, to;
  };
  int started = 0, completed = 0, acquired = 0;
  std::map<std::string, int> errors;  // by message
  Clock::duration max_latency{};
  std::map<std::string, std::vector<Window>> windows;
  int loop_failures_ = 0;

  bool saw(error e) const { return errors.count(make_error_code(e).message()) > 0; }
  std::string summary() const {
    std::string s = std::to_string(started) + " ops, " + std::to_string(acquired) + " acquired";
    for (const auto& [what, n] : errors) s += ", " + std::to_string(n) + " x " + what;
    return s;
  }
  /// The first overlap of two validity windows on one resource, or "".
  std::string overlap() const {
    for (auto [resource, list] : windows) {
      std::sort(list.begin(), list.end(), [](auto& a, auto& b) { return a.from < b.from; });
      for (std::size_t i = 1; i < list.size(); ++i) {
        if (list[i].from < list[i - 1].to) return resource;
      }
    }
    return {};
  }

 private:
  static ConnectionConfig with_timeouts(ConnectionConfig cfg) {
    cfg.command_timeout = command_timeout;
    cfg.connect_timeout = connect_timeout;
    return cfg;
  }

  // Completions are counted in plain callbacks, kept until the end: a second call of any
  // handler (even long after, from a late reply) shows up in `double_completions`.
  template <class... Values>
  struct Completion {
    int calls = 0;
    error_code ec;
    std::tuple<Values...> values;
    asio::steady_timer wake;
    explicit Completion(asio::any_io_executor ex) : wake(ex, Clock::time_point::max()) {}
  };

  template <class... Values>
  auto completion(asio::any_io_executor ex) {
    auto c = std::make_shared<Completion<Values...>>(ex);
    all_calls_.push_back([c] { return c->calls; });
    auto handler = [c](error_code ec, Values... v) {
      if (++c->calls == 1) {
        c->ec = ec;
        c->values = std::make_tuple(std::move(v)...);
      }
      c->wake.cancel();
    };
    return std::make_pair(c, handler);
  }

  asio::awaitable<void> loop(int id) {
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer pause(ex);
    for (int round = 0; !stopping_; ++round) {
      const auto& resource = resources_[(id + round) % resources_.size()];
      const auto t0 = Clock::now();
      ++started;
      auto [acq, on_acquired] = completion<LockGuard>(ex);
      locks_.async_acquire(resource, load_options, on_acquired);
      co_await acq->wake.async_wait(asio::as_tuple(asio::use_awaitable));
      record(acq->ec, Clock::now() - t0);
      LockGuard guard = std::move(std::get<0>(acq->values));
      if (!acq->ec && guard) {
        ++acquired;
        const auto from = Clock::now();
        pause.expires_after(20ms);  // the "work"
        co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
        const auto end = std::min(Clock::now(), guard.valid_until());
        windows[resource].push_back({from, end});
        const auto t1 = Clock::now();
        ++started;
        auto [rel, on_released] = completion<bool>(ex);
        guard.async_release(on_released);
        co_await rel->wake.async_wait(asio::as_tuple(asio::use_awaitable));
        record(rel->ec, Clock::now() - t1);
      } else {
        pause.expires_after(10ms);
        co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      }
    }
  }

  void record(error_code ec, Clock::duration latency) {
    ++completed;
    max_latency = std::max(max_latency, latency);
    if (ec) ++errors[ec.message()];
  }

 public:
  /// After stop(): handlers called more than once.
  int double_completions() const {
    int n = 0;
    for (const auto& calls : all_calls_) n += calls() > 1;
    return n;
  }

 private:
  asio::io_context io_;
  // The completions hold timers of io_: destroyed before it (declared after it).
  std::vector<std::function<int()>> all_calls_;
  LockManager locks_;
  std::vector<std::string> resources_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::thread thread_;
};

std::vector<std::string> three_resources() {
  const auto base = unique_resource();
  return {base + ":a", base + ":b", base + ":c"};
}

/// The four checks, after the load has stopped.
void check(LockLoad& load, const RedisServer& server, const std::vector<std::string>& resources,
           bool exclusion_expected = true) {
  load.stop();
  SCOPED_TRACE(load.summary());
  // The figures docs/reliability.md quotes.
  std::printf("[ fault    ] %s; max latency %lld ms; overlap: %s\n", load.summary().c_str(),
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(load.max_latency).count()),
              load.overlap().empty() ? "none" : "YES");
  EXPECT_EQ(load.loop_failures_, 0);
  EXPECT_GT(load.started, 20);
  EXPECT_EQ(load.completed, load.started);
  EXPECT_EQ(load.double_completions(), 0);
  EXPECT_GT(load.acquired, 0);
  EXPECT_LT(load.max_latency, latency_bound);
  if (exclusion_expected) {
    EXPECT_EQ(load.overlap(), "") << "two holders at once";
  }
  // No lease outlives its ttl (plus the server's expiry cycle).
  std::this_thread::sleep_for(load_options.ttl + 200ms);
  for (const auto& r : resources) EXPECT_EQ(server.command({"EXISTS", lease_key(r)}), "0") << r;
}

void run_for(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

}  // namespace

TEST(FaultMatrix, ServerKilledAndRestartedWithFsyncedAof) {
  // Leases survive a restart only if the server persisted them before it died.
  RedisServer server({"--appendonly", "yes", "--appendfsync", "always"});
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  run_for(300ms);
  server.kill(SIGKILL);
  run_for(300ms);
  server.restart();
  run_for(700ms);
  check(load, server, resources);
  EXPECT_TRUE(load.saw(error::connection_lost) || load.saw(error::connect_failed) ||
              load.saw(error::timeout));
}

TEST(FaultMatrix, ServerPausedPastTheCommandDeadline) {
  RedisServer server;
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  run_for(300ms);
  server.pause();
  run_for(800ms);
  server.resume();
  run_for(700ms);
  check(load, server, resources);
  EXPECT_TRUE(load.saw(error::timeout));
}

TEST(FaultMatrix, OurConnectionsKilledRepeatedly) {
  RedisServer server;
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  for (int i = 0; i < 6; ++i) {
    run_for(150ms);
    server.command({"CLIENT", "KILL", "TYPE", "normal"});
  }
  run_for(500ms);
  check(load, server, resources);
}

TEST(FaultMatrix, DebugSleepPastTheCommandDeadline) {
  RedisServer server;
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  run_for(300ms);
  server.command({"DEBUG", "SLEEP", "0.8"});  // blocks the server (and this call)
  run_for(700ms);
  check(load, server, resources);
  EXPECT_TRUE(load.saw(error::timeout));
}

TEST(FaultMatrix, ScriptCacheFlushedUnderLoad) {
  RedisServer server;
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  for (int i = 0; i < 8; ++i) {
    run_for(100ms);
    server.command({"SCRIPT", "FLUSH"});
  }
  run_for(300ms);
  check(load, server, resources);
  EXPECT_TRUE(load.errors.empty()) << "NOSCRIPT must be recovered, not reported";
}

TEST(FaultMatrix, MaxmemoryWithNoeviction) {
  RedisServer server({"--maxmemory-policy", "noeviction"});
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  run_for(300ms);
  server.command({"CONFIG", "SET", "maxmemory", "1"});
  run_for(500ms);
  server.command({"CONFIG", "SET", "maxmemory", "0"});
  run_for(500ms);
  check(load, server, resources);
  EXPECT_TRUE(load.saw(error::out_of_memory));
}

TEST(FaultMatrix, TurnedIntoAReadOnlyReplicaAndBack) {
  RedisServer server;
  RedisServer other;
  const auto resources = three_resources();
  LockLoad load(server.config(), resources, 8);
  run_for(300ms);
  server.command({"REPLICAOF", "127.0.0.1", std::to_string(other.port())});
  run_for(600ms);
  server.command({"REPLICAOF", "NO", "ONE"});
  run_for(500ms);
  // Becoming a replica replaced the server's data with the (empty) primary's: held leases
  // vanished, so exclusion cannot hold across this fault — fencing tokens are what protects
  // a resource then. Everything else must.
  check(load, server, resources, /*exclusion_expected=*/false);
  EXPECT_TRUE(load.saw(error::read_only));
}

TEST(FaultMatrix, AddedLatencyOnThePath) {
  RedisServer server;
  TcpProxy proxy(server.port());
  proxy.set_delay(40ms);  // 80 ms round trips, well inside the 300 ms command deadline
  auto cfg = server.config();
  cfg.port = proxy.port();
  const auto resources = three_resources();
  LockLoad load(cfg, resources, 8);
  run_for(1500ms);
  check(load, server, resources);
  EXPECT_TRUE(load.errors.empty());
}

TEST(FaultMatrix, PartitionThatHeals) {
  RedisServer server;
  TcpProxy proxy(server.port());
  auto cfg = server.config();
  cfg.port = proxy.port();
  const auto resources = three_resources();
  LockLoad load(cfg, resources, 8);
  run_for(300ms);
  proxy.set_blackhole(true);
  run_for(1000ms);
  proxy.set_blackhole(false);
  run_for(1000ms);
  check(load, server, resources);
  EXPECT_TRUE(load.saw(error::timeout));
}

TEST(FaultMatrix, PartitionThatHealsOverTls) {
  // The same partition with every byte inside TLS: timeouts, then fresh TLS handshakes.
  TlsRedisServer tls;
  TcpProxy proxy(tls.tls_port);
  auto cfg = tls.config();
  cfg.port = proxy.port();
  const auto resources = three_resources();
  LockLoad load(cfg, resources, 8);
  run_for(300ms);
  proxy.set_blackhole(true);
  run_for(1000ms);
  proxy.set_blackhole(false);
  run_for(1000ms);
  check(load, *tls.server, resources);
  EXPECT_TRUE(load.saw(error::timeout));
}

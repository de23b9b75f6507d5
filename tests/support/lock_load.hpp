// SPDX-License-Identifier: MIT
// A steady load of lock traffic for fault tests: loops that take, hold and release locks
// on a thread of their own, recording every completion (exactly once?), latency, errors and
// each holder's validity window (for the mutual exclusion check).
#pragma once

#include "live.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

namespace redis_lock::test {

using Clock = std::chrono::steady_clock;
using boost::system::error_code;

inline constexpr auto command_timeout = 300ms;  // also the connect timeout (LockLoad default)
inline constexpr LockOptions load_options{.ttl = 600ms, .wait = 200ms};
// Longest an acquire may take: its wait, a connect, a command, retries' jitter, and slack
// for a loaded 2-core machine running sanitizers.
inline constexpr auto latency_bound = 2500ms;

/// Lock loops on a thread of their own, recording what happened.
class LockLoad {
 public:
  /// `deadline`: the command and connect timeouts (300 ms unless a test says otherwise).
  LockLoad(ConnectionConfig cfg, std::vector<std::string> resources, int loops,
           LockOptions options = load_options, std::chrono::milliseconds deadline = command_timeout)
      : locks_(io_.get_executor(), with_timeouts(std::move(cfg), deadline)),
        resources_(std::move(resources)),
        options_(options) {
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
  int release_errors = 0;             // releases that failed: their lease stays to its ttl
  std::map<std::string, int> errors;  // by message (acquires and releases)
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
  static ConnectionConfig with_timeouts(ConnectionConfig cfg, std::chrono::milliseconds deadline) {
    cfg.command_timeout = deadline;
    cfg.connect_timeout = deadline;
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
      locks_.async_acquire(resource, options_, on_acquired);
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
        if (rel->ec) ++release_errors;
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
  LockOptions options_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::thread thread_;
};

/// Stops `load`, prints its summary line tagged `tag` (the figures the docs quote) and checks
/// what every load test asserts: no loop failed, every operation completed exactly once and
/// within the latency bound, and, if `exclusion_expected`, never two holders at once.
inline void stop_and_check(LockLoad& load, const char* tag, bool exclusion_expected) {
  load.stop();
  SCOPED_TRACE(load.summary());
  std::printf("[ %-9s] %s; max latency %lld ms; overlap: %s\n", tag, load.summary().c_str(),
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(load.max_latency).count()),
              load.overlap().empty() ? "none" : "YES");
  EXPECT_EQ(load.loop_failures_, 0);
  EXPECT_EQ(load.completed, load.started);
  EXPECT_EQ(load.double_completions(), 0);
  EXPECT_LT(load.max_latency, latency_bound);
  if (exclusion_expected) {
    EXPECT_EQ(load.overlap(), "") << "two holders at once";
  }
}

}  // namespace redis_lock::test

// SPDX-License-Identifier: MIT
// What redis_lock::PrometheusObserver costs: client CPU per uncontended acquire + release
// with the observer on vs off, the same traffic on the same server in the same process, in
// alternating rounds (off, on, on, off, ...) so that drift hits both sides alike. Two
// shapes: one pair at a time, and 64 in flight. And the observer alone: its calls for one
// pair (acquired, hold end, release), timed without I/O.
//
//   observer_bench --port P [--host 127.0.0.1] [--quick]
#include <redis_lock/prometheus.hpp>
#include <redis_lock/redis_lock.hpp>

#include <prometheus/registry.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

/// This process's CPU time (user + system), to the nanosecond (getrusage's is tick-grained).
double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Sample {
  double cpu_us_per_pair;
  double pairs_per_s;
};

/// `pairs` uncontended acquire + release pairs, `in_flight` at a time, on a manager with or
/// without the observer.
Sample run(const redis_lock::ConnectionConfig& config,
           std::shared_ptr<redis_lock::Observer> observer, int in_flight, int pairs, int round) {
  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), config, {.observer = std::move(observer)});
  // Warm up: the connection, the scripts loaded.
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto g =
            co_await locks.async_acquire("bench:observer:warm", {.ttl = 5s}, asio::use_awaitable);
        co_await g.async_release(asio::use_awaitable);
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
  io.restart();
  const int each = pairs / in_flight;
  for (int w = 0; w < in_flight; ++w) {
    asio::co_spawn(
        io,
        [&, w]() -> asio::awaitable<void> {
          const std::string resource =
              "bench:observer:" + std::to_string(round) + ":" + std::to_string(w);
          for (int i = 0; i < each; ++i) {
            auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
            if (!g) std::abort();  // uncontended: never held elsewhere
            co_await g.async_release(asio::use_awaitable);
          }
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);  // a failed acquire or release ends the run
        });
  }
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  io.run();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const double done = static_cast<double>(each) * in_flight;
  return {cpu * 1e6 / done, done / wall};
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 0;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--port") && i + 1 < argc) {
      port = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--host") && i + 1 < argc) {
      host = argv[++i];
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: observer_bench --port P [--host H] [--quick]\n");
      return 2;
    }
  }
  if (port <= 0) {
    std::fprintf(stderr, "observer_bench: --port is required\n");
    return 2;
  }
  redis_lock::ConnectionConfig config;
  config.host = host;
  config.port = static_cast<std::uint16_t>(port);

  // The observer alone: one pair's events, no I/O.
  {
    prometheus::Registry registry;
    redis_lock::PrometheusObserver observer(registry);
    const int n = quick ? 200'000 : 1'000'000;
    redis_lock::AcquireEvent acquired{
        "order:1", redis_lock::AcquireOutcome::acquired, {}, 800us, 1, false, 1};
    const redis_lock::HoldEvent end{"order:1", redis_lock::AcquireKind::mutex,
                                    redis_lock::HoldEnd::released, 2ms};
    const redis_lock::LeaseEvent release{
        "order:1", redis_lock::LeaseCommand::release, true, {}, 300us};
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      observer.on_acquire(acquired);
      observer.on_hold_end(end);
      observer.on_lease(release);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
    std::printf("PrometheusObserver alone: %.0f ns per acquire + release (its three calls)\n\n",
                ns);
  }

  // Many short rounds, the sides rotating within each: this machine's drift and its
  // neighbours (the server shares the cores) hit the three sides alike.
  const int rounds = quick ? 6 : 40;
  std::printf(
      "| shape | rounds x pairs | client CPU/pair off (us) | on (us) | on/off per round, median "
      "[range] | ratio of the medians | ratio of the minima | an empty Observer / off (median) | "
      "pairs/s off | on |\n|---|---|---|---|---|---|---|---|---|---|\n");
  // An observer that does nothing: what the events cost the engine, without Prometheus.
  struct Empty final : redis_lock::Observer {};
  for (const int in_flight : {1, 64}) {
    // About half a second a side (the sequential shape is bound by round trips).
    const int pairs = (quick ? 20000 : 40000) / (in_flight == 1 ? 10 : 1);
    std::vector<double> off_cpu, on_cpu, empty_cpu, ratios, empty_ratios, off_rate, on_rate;
    for (int r = 0; r < rounds; ++r) {
      // The three sides in a rotating order: off, on, empty; on, empty, off; ...
      Sample s[3];
      for (int k = 0; k < 3; ++k) {
        const int side = (k + r) % 3;  // 0 off, 1 on (Prometheus), 2 an empty observer
        prometheus::Registry registry;
        std::shared_ptr<redis_lock::Observer> observer;
        if (side == 1) observer = redis_lock::make_prometheus_observer(registry);
        if (side == 2) observer = std::make_shared<Empty>();
        s[side] = run(config, observer, in_flight, pairs, r * 3 + k);
      }
      off_cpu.push_back(s[0].cpu_us_per_pair);
      on_cpu.push_back(s[1].cpu_us_per_pair);
      empty_cpu.push_back(s[2].cpu_us_per_pair);
      ratios.push_back(s[1].cpu_us_per_pair / s[0].cpu_us_per_pair);
      empty_ratios.push_back(s[2].cpu_us_per_pair / s[0].cpu_us_per_pair);
      off_rate.push_back(s[0].pairs_per_s);
      on_rate.push_back(s[1].pairs_per_s);
    }
    // Interference (the server, other processes) only adds CPU: the minima are the least
    // disturbed runs of each side.
    const auto least = [](const std::vector<double>& v) {
      return *std::min_element(v.begin(), v.end());
    };
    std::printf(
        "| %d in flight | %d x %d | %.2f | %.2f | %.3f [%.3f, %.3f] | %.3f | %.3f | %.3f | %.0f | "
        "%.0f |\n",
        in_flight, rounds, pairs, median(off_cpu), median(on_cpu), median(ratios), least(ratios),
        *std::max_element(ratios.begin(), ratios.end()), median(on_cpu) / median(off_cpu),
        least(on_cpu) / least(off_cpu), median(empty_ratios), median(off_rate), median(on_rate));
    std::fflush(stdout);
  }
  return 0;
}

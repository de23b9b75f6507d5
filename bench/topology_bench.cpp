// SPDX-License-Identifier: MIT
// Uncontended latency and throughput of redis_lock on one server, on a 3-master Cluster and
// on Redlock over 5 independent masters, in the same run and on the same machine. It starts
// its own servers (the test harness's), then interleaves the three in rounds, so that a
// machine whose speed drifts (a VM) affects them alike; medians of the rounds are reported,
// with ratios to standalone.
//
//   topology_bench [--quick] [--json FILE]
#include "redis_cluster.hpp"
#include "redis_server.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using redis_lock::ConnectionConfig;
using redis_lock::LockManager;

namespace {

struct Round {
  double p50_us = 0, p99_us = 0, pairs_per_s = 0, cpu_us = 0;
};

double thread_cpu_us() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// `n` sequential acquire+release pairs (distinct resources), then `window` of 64 loops in
/// flight doing the same; one manager, one thread.
Round measure(const ConnectionConfig& cfg, int n, std::chrono::milliseconds window, int round) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  Round out;
  std::vector<double> samples;
  const std::string base = "bench:" + std::to_string(round) + ":";
  double cpu_start = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = -50; i < n; ++i) {
          if (i == 0) cpu_start = thread_cpu_us();  // 50 warm-up pairs (connections, scripts)
          const auto t0 = Clock::now();
          auto [ec, g] = co_await locks.async_acquire(base + std::to_string(i), {.ttl = 10s},
                                                      asio::as_tuple(asio::use_awaitable));
          if (ec || !g) throw std::runtime_error("acquire failed: " + ec.message());
          auto [rec, released] = co_await g.async_release(asio::as_tuple(asio::use_awaitable));
          if (rec || !released) throw std::runtime_error("release failed");
          if (i >= 0) {
            samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
          }
        }
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
  out.cpu_us = (thread_cpu_us() - cpu_start) / n;
  std::sort(samples.begin(), samples.end());
  out.p50_us = samples[samples.size() / 2];
  out.p99_us = samples[samples.size() * 99 / 100];

  long long pairs = 0;
  const auto until = Clock::now() + window;
  for (int loop = 0; loop < 64; ++loop) {
    asio::co_spawn(
        io,
        [&, loop]() -> asio::awaitable<void> {
          const std::string name = base + "t" + std::to_string(loop) + ":";
          for (long long i = 0; Clock::now() < until; ++i) {
            auto [ec, g] = co_await locks.async_acquire(name + std::to_string(i % 256), {.ttl = 10s},
                                                        asio::as_tuple(asio::use_awaitable));
            if (ec || !g) throw std::runtime_error("acquire failed: " + ec.message());
            auto [rec, released] = co_await g.async_release(asio::as_tuple(asio::use_awaitable));
            if (rec || !released) throw std::runtime_error("release failed");
            ++pairs;
          }
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
  }
  const auto t0 = Clock::now();
  io.restart();
  io.run();
  out.pairs_per_s = static_cast<double>(pairs) / std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: topology_bench [--quick] [--json FILE]\n");
      return 2;
    }
  }
  const int rounds = quick ? 3 : 7;
  const int n = quick ? 500 : 2000;
  const auto window = quick ? 500ms : 1500ms;

  redis_lock::test::RedisServer standalone;
  redis_lock::test::RedisCluster cluster(3, 0);
  std::vector<std::unique_ptr<redis_lock::test::RedisServer>> masters;
  ConnectionConfig redlock;
  redlock.topology = redis_lock::Topology::redlock;
  for (int i = 0; i < 5; ++i) {
    masters.push_back(std::make_unique<redis_lock::test::RedisServer>());
    redlock.nodes.push_back({"127.0.0.1", masters.back()->port()});
  }
  struct Setup {
    const char* name;
    ConnectionConfig cfg;
    std::vector<double> p50, p99, tput, cpu;
  };
  std::vector<Setup> setups = {{"standalone", standalone.config(), {}, {}, {}, {}},
                               {"cluster (3 masters)", cluster.config(), {}, {}, {}, {}},
                               {"redlock (5 masters)", redlock, {}, {}, {}, {}}};
  for (int r = 0; r < rounds; ++r) {
    for (auto& s : setups) {
      const auto m = measure(s.cfg, n, window, r);
      s.p50.push_back(m.p50_us);
      s.p99.push_back(m.p99_us);
      s.tput.push_back(m.pairs_per_s);
      s.cpu.push_back(m.cpu_us);
    }
  }
  const double base_p50 = median(setups[0].p50);
  const double base_tput = median(setups[0].tput);
  const double base_cpu = median(setups[0].cpu);
  std::printf("%-22s %10s %10s %8s %12s %8s %14s %8s\n", "topology", "p50 us", "p99 us",
              "p50 x", "client cpu us", "cpu x", "pairs/s @64", "tput x");
  std::string out = "{\"rounds\":" + std::to_string(rounds) + ",\"topologies\":[";
  for (std::size_t i = 0; i < setups.size(); ++i) {
    const auto& s = setups[i];
    const double p50 = median(s.p50), p99 = median(s.p99), tput = median(s.tput);
    const double cpu = median(s.cpu);
    std::printf("%-22s %10.1f %10.1f %7.2fx %12.1f %7.2fx %14.0f %7.2fx\n", s.name, p50, p99,
                p50 / base_p50, cpu, cpu / base_cpu, tput, tput / base_tput);
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\":\"%s\",\"p50_us\":%.1f,\"p99_us\":%.1f,\"pairs_per_s_64\":%.0f,"
                  "\"client_cpu_us\":%.2f,\"p50_ratio\":%.3f,\"throughput_ratio\":%.3f}",
                  i ? "," : "", s.name, p50, p99, tput, cpu, p50 / base_p50, tput / base_tput);
    out += buf;
  }
  out += "]}\n";
  if (!json.empty()) {
    if (FILE* f = std::fopen(json.c_str(), "w")) {
      std::fputs(out.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}

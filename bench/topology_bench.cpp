// SPDX-License-Identifier: MIT
// Uncontended latency and throughput of redis_lock on one server, on a 3-master Cluster and
// on Redlock over 5 independent masters, in the same run and on the same machine. It starts
// its own servers (the test harness's), then interleaves the three in rounds, so that a
// machine whose speed drifts (a VM) affects them alike. Ratios to standalone are taken within
// each round; the table gives their median and range (and medians of the absolute values).
//
//   topology_bench [--quick] [--json FILE]
#include "redis_cluster.hpp"
#include "redis_server.hpp"
#include "stats.hpp"

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

using bench::median;
using bench::Spread;
using bench::spread;

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
            auto [ec, g] = co_await locks.async_acquire(
                name + std::to_string(i % 256), {.ttl = 10s}, asio::as_tuple(asio::use_awaitable));
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
  out.pairs_per_s =
      static_cast<double>(pairs) / std::chrono::duration<double>(Clock::now() - t0).count();
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
    std::vector<Round> rounds;
    std::vector<double> p50_x, cpu_x, tput_x;  // to standalone, within each round
  };
  std::vector<Setup> setups = {{"standalone", standalone.config(), {}, {}, {}, {}},
                               {"cluster (3 masters)", cluster.config(), {}, {}, {}, {}},
                               {"redlock (5 masters)", redlock, {}, {}, {}, {}}};
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < setups.size(); ++k) {
      auto& s = setups[r % 2 ? setups.size() - 1 - k : k];  // the order alternates
      s.rounds.push_back(measure(s.cfg, n, window, r));
    }
    const Round& base = setups[0].rounds.back();
    for (auto& s : setups) {
      const Round& m = s.rounds.back();
      s.p50_x.push_back(m.p50_us / base.p50_us);
      s.cpu_x.push_back(m.cpu_us / base.cpu_us);
      s.tput_x.push_back(m.pairs_per_s / base.pairs_per_s);
    }
  }
  const auto of = [](const Setup& s, double Round::*field) {
    std::vector<double> v;
    for (const auto& m : s.rounds) v.push_back(m.*field);
    return median(v);
  };
  const auto text = [](const Spread& x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.2fx (%.2f-%.2f)", x.median, x.min, x.max);
    return std::string(buf);
  };
  std::printf("%-22s %9s %9s %-19s %9s %-19s %11s %-19s\n", "topology", "p50 us", "p99 us", "p50 x",
              "cpu us", "cpu x", "pairs/s @64", "tput x");
  std::string out = "{\"rounds\":" + std::to_string(rounds) + ",\"topologies\":[";
  for (std::size_t i = 0; i < setups.size(); ++i) {
    const auto& s = setups[i];
    const double p50 = of(s, &Round::p50_us), p99 = of(s, &Round::p99_us);
    const double tput = of(s, &Round::pairs_per_s), cpu = of(s, &Round::cpu_us);
    const Spread p50_x = spread(s.p50_x), cpu_x = spread(s.cpu_x), tput_x = spread(s.tput_x);
    std::printf("%-22s %9.1f %9.1f %-19s %9.1f %-19s %11.0f %-19s\n", s.name, p50, p99,
                text(p50_x).c_str(), cpu, text(cpu_x).c_str(), tput, text(tput_x).c_str());
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\":\"%s\",\"p50_us\":%.1f,\"p99_us\":%.1f,\"pairs_per_s_64\":%.0f,"
                  "\"client_cpu_us\":%.2f,\"p50_ratio\":[%.3f,%.3f,%.3f],"
                  "\"cpu_ratio\":[%.3f,%.3f,%.3f],\"throughput_ratio\":[%.3f,%.3f,%.3f]}",
                  i ? "," : "", s.name, p50, p99, tput, cpu, p50_x.median, p50_x.min, p50_x.max,
                  cpu_x.median, cpu_x.min, cpu_x.max, tput_x.median, tput_x.min, tput_x.max);
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

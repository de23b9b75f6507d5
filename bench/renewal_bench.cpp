// SPDX-License-Identifier: MIT
// Benchmark: the cost of keeping N auto-renewed locks (default 100k, ttl 30 s, renewed every
// ttl/3) over two renewal periods: client CPU as a share of one core, renewal commands, and
// client memory per held lock. Baseline in the same run: a raw hiredis client sending the
// same extension scripts for N leases, pipelined in batches of 1000.
//
//   renewal_bench [--port N] [--locks N] [--ttl-ms T]
#include <redis_lock/redis_lock.hpp>

#include "keys.hpp"
#include "raw_redis.hpp"
#include "redis_lock_scripts.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <hiredis/hiredis.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace detail = redis_lock::detail;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

long evalsha_calls(redisContext* c) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
  long calls = 0;
  if (r != nullptr && r->str != nullptr) {
    const std::string text(r->str, r->len);
    const auto at = text.find("cmdstat_evalsha:calls=");
    if (at != std::string::npos) calls = std::atol(text.c_str() + at + 22);
  }
  if (r != nullptr) freeReplyObject(r);
  return calls;
}

/// Raw: one renewal round of `n` extension scripts, pipelined in batches of 1000.
double raw_round_cpu(std::uint16_t port, int n, long ttl_ms) {
  redisContext* c = bench::connect_or_exit(port);
  auto* loaded = static_cast<redisReply*>(redisCommand(
      c, "SCRIPT LOAD %b", detail::extend_script.body.data(), detail::extend_script.body.size()));
  freeReplyObject(loaded);
  std::vector<detail::ResourceKeys> keys;
  for (int i = 0; i < n; ++i) keys.push_back(detail::make_keys("lock:", "bench:renew:raw:" + std::to_string(i)));
  const std::string ttl = std::to_string(ttl_ms);
  const std::string token = "0123456789abcdef0123456789abcdef";
  const double cpu0 = cpu_seconds();
  for (int start = 0; start < n; start += 1000) {
    const int end = std::min(n, start + 1000);
    for (int i = start; i < end; ++i) {
      const char* argv[] = {"EVALSHA", detail::extend_script.sha1.data(), "1",
                            keys[i].lease.c_str(), token.c_str(), ttl.c_str()};
      const size_t lens[] = {7, 40, 1, keys[i].lease.size(), token.size(), ttl.size()};
      redisAppendCommandArgv(c, 6, argv, lens);
    }
    for (int i = start; i < end; ++i) {
      void* reply = nullptr;
      redisGetReply(c, &reply);
      freeReplyObject(reply);
    }
  }
  const double cpu = cpu_seconds() - cpu0;
  redisFree(c);
  return cpu;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint16_t port = 6379;
  int n = 100000;
  long ttl_ms = 30000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--port") port = static_cast<std::uint16_t>(std::atoi(argv[i + 1]));
    else if (k == "--locks") n = std::atoi(argv[i + 1]);
    else if (k == "--ttl-ms") ttl_ms = std::atol(argv[i + 1]);
  }
  const auto ttl = std::chrono::milliseconds(ttl_ms);
  redisContext* admin = bench::connect_or_exit(port);

  const double raw_cpu = raw_round_cpu(port, n, ttl_ms);

  asio::io_context io(1);
  redis_lock::ConnectionConfig cfg;
  cfg.port = port;
  cfg.command_timeout = 10s;  // 100k pipelined commands take a while to answer
  redis_lock::LockManager locks(io.get_executor(), cfg);
  std::vector<redis_lock::LockGuard> held(n);
  const long rss_before = rss_kib();
  int next = 0, acquired = 0;
  std::function<void()> take = [&] {
    if (next >= n) return;
    const int i = next++;
    locks.async_acquire("bench:renew:" + std::to_string(i), {.ttl = ttl, .auto_renew = true},
                        [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
                          if (ec || !g) {
                            std::fprintf(stderr, "acquire failed: %s\n", ec.message().c_str());
                            std::exit(1);
                          }
                          held[i] = std::move(g);
                          if (++acquired == n) io.stop();  // renewal timers keep run() busy
                          take();
                        });
  };
  for (int i = 0; i < 1000; ++i) take();  // 1000 in flight while acquiring
  io.run_for(120s);
  if (acquired != n) {
    std::fprintf(stderr, "only %d of %d acquired\n", acquired, n);
    return 1;
  }
  const long rss_held = rss_kib();

  // Two renewal periods of holding, measured.
  const auto period = std::max(ttl / 3, 1ms);
  const long calls0 = evalsha_calls(admin);
  const double cpu0 = cpu_seconds();
  const auto wall0 = Clock::now();
  io.restart();
  io.run_for(2 * period + period / 10);
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  const double cpu = cpu_seconds() - cpu0;
  const long renewals = evalsha_calls(admin) - calls0;
  int lost = 0;
  for (auto& g : held) lost += g.lost() ? 1 : 0;

  std::printf("%d auto-renewed locks, ttl %ld ms, renewed every %lld ms; measured %.1f s\n\n", n,
              ttl_ms, static_cast<long long>(period.count()), wall);
  std::printf("%-48s %12s\n", "metric", "value");
  std::printf("%-48s %12ld\n", "renewal commands (EVALSHA) in the window", renewals);
  std::printf("%-48s %12d\n", "leases lost", lost);
  std::printf("%-48s %11.2f%%\n", "client CPU, share of one core (target < 5%)", 100.0 * cpu / wall);
  std::printf("%-48s %12.2f\n", "client CPU per renewal (us)", renewals ? 1e6 * cpu / renewals : 0.0);
  std::printf("%-48s %12.2f\n", "raw hiredis CPU per renewal (us, same script)", 1e6 * raw_cpu / n);
  std::printf("%-48s %12.0f\n", "client memory per held lock (bytes, RSS)",
              1024.0 * static_cast<double>(rss_held - rss_before) / n);
  redisFree(admin);
  // Let go of everything before the manager goes (the releases run until idle).
  held.clear();
  io.restart();
  io.run_for(60s);
  return lost == 0 ? 0 : 1;
}

// SPDX-License-Identifier: MIT
// Benchmark: one client's acquire+release latency and pipelined throughput, beside a raw
// hiredis client doing the same server-side work (the same Lua scripts, keys and arguments)
// in the same run against the same server. Prints a table and ratios.
//
//   acquire_release_bench [--port N] [--pairs N] [--seconds S] [--rounds R]
#include <redis_lock/redis_lock.hpp>

#include "keys.hpp"
#include "raw_redis.hpp"
#include "redis_lock_scripts.hpp"
#include "token.hpp"

#include <boost/asio/io_context.hpp>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace detail = redis_lock::detail;

namespace {

struct Args {
  std::uint16_t port = 6379;
  int pairs = 20000;
  double seconds = 2.0;
  int rounds = 3;
  int in_flight = 64;
  std::string only;  // "lib-throughput" etc., for profiling one workload
};

struct Latency {
  double p50_us = 0, p99_us = 0;
};

Latency summarize(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

// ------------------------------------------------------------------ raw hiredis baseline

class RawClient {
 public:
  explicit RawClient(std::uint16_t port) {
    ctx_ = bench::connect_or_exit(port);
    for (const auto* s : {&detail::acquire_script, &detail::release_script}) {
      auto* r = static_cast<redisReply*>(
          redisCommand(ctx_, "SCRIPT LOAD %b", s->body.data(), s->body.size()));
      freeReplyObject(r);
    }
  }
  ~RawClient() { redisFree(ctx_); }

  void append_acquire(const detail::ResourceKeys& k, const std::string& token) {
    const char* argv[] = {"EVALSHA", detail::acquire_script.sha1.data(), "2", k.lease.c_str(),
                          k.fence.c_str(), token.c_str(), "10000"};
    const size_t lens[] = {7, 40, 1, k.lease.size(), k.fence.size(), token.size(), 5};
    redisAppendCommandArgv(ctx_, 7, argv, lens);
  }
  void append_release(const detail::ResourceKeys& k, const std::string& token) {
    const char* argv[] = {"EVALSHA", detail::release_script.sha1.data(), "1", k.lease.c_str(),
                          token.c_str(), k.channel.c_str()};
    const size_t lens[] = {7, 40, 1, k.lease.size(), token.size(), k.channel.size()};
    redisAppendCommandArgv(ctx_, 6, argv, lens);
  }
  bool read_ok() {
    void* reply = nullptr;
    if (redisGetReply(ctx_, &reply) != REDIS_OK || reply == nullptr) std::exit(1);
    auto* r = static_cast<redisReply*>(reply);
    const bool ok = r->type != REDIS_REPLY_ERROR;
    freeReplyObject(r);
    return ok;
  }

 private:
  redisContext* ctx_ = nullptr;
};

Latency raw_latency(const Args& a) {
  RawClient raw(a.port);
  const auto keys = detail::make_keys("lock:", "bench:raw:seq");
  std::vector<double> us;
  us.reserve(a.pairs);
  for (int i = 0; i < a.pairs; ++i) {
    const auto t0 = Clock::now();
    const auto token = detail::random_token();  // the library mints one too
    raw.append_acquire(keys, token);
    raw.read_ok();
    raw.append_release(keys, token);
    raw.read_ok();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return summarize(us);
}

double raw_throughput(const Args& a) {
  RawClient raw(a.port);
  std::vector<detail::ResourceKeys> keys;
  for (int i = 0; i < a.in_flight; ++i) {
    keys.push_back(detail::make_keys("lock:", "bench:raw:tp:" + std::to_string(i)));
  }
  std::vector<std::string> tokens(a.in_flight);
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(a.seconds);
  while (Clock::now() < until) {
    // A batch of `in_flight` acquires, then their releases: pipelined as deep as ours.
    for (int i = 0; i < a.in_flight; ++i) {
      tokens[i] = detail::random_token();
      raw.append_acquire(keys[i], tokens[i]);
    }
    for (int i = 0; i < a.in_flight; ++i) raw.read_ok();
    for (int i = 0; i < a.in_flight; ++i) raw.append_release(keys[i], tokens[i]);
    for (int i = 0; i < a.in_flight; ++i) raw.read_ok();
    pairs += a.in_flight;
  }
  return pairs / std::chrono::duration<double>(Clock::now() - start).count();
}

// ------------------------------------------------------------------ redis_lock

Latency lib_latency(const Args& a) {
  asio::io_context io(1);
  redis_lock::ConnectionConfig cfg;
  cfg.port = a.port;
  redis_lock::LockManager locks(io.get_executor(), cfg);
  std::vector<double> us;
  us.reserve(a.pairs);
  int left = a.pairs;
  Clock::time_point t0;
  std::function<void()> next = [&] {
    t0 = Clock::now();
    locks.async_acquire("bench:lib:seq", {.ttl = 10s},
                        [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                          if (ec || !g) std::exit(1);
                          g.async_release([&](boost::system::error_code ec2, bool) {
                            if (ec2) std::exit(1);
                            us.push_back(std::chrono::duration<double, std::micro>(
                                             Clock::now() - t0).count());
                            if (--left > 0) next();
                          });
                        });
  };
  next();
  io.run();
  return summarize(us);
}

double lib_throughput(const Args& a) {
  asio::io_context io(1);
  redis_lock::ConnectionConfig cfg;
  cfg.port = a.port;
  redis_lock::LockManager locks(io.get_executor(), cfg);
  long pairs = 0;
  bool stop = false;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(a.seconds);
  std::vector<std::string> names;
  for (int i = 0; i < a.in_flight; ++i) names.push_back("bench:lib:tp:" + std::to_string(i));
  std::function<void(int)> chain = [&](int slot) {
    locks.async_acquire(names[slot], {.ttl = 10s},
                        [&, slot](boost::system::error_code ec, redis_lock::LockGuard g) {
                          if (ec || !g) std::exit(1);
                          g.async_release([&, slot](boost::system::error_code ec2, bool) {
                            if (ec2) std::exit(1);
                            ++pairs;
                            if (!stop && Clock::now() >= until) stop = true;
                            if (!stop) chain(slot);
                          });
                        });
  };
  for (int i = 0; i < a.in_flight; ++i) chain(i);
  io.run();
  return pairs / std::chrono::duration<double>(Clock::now() - start).count();
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--port") a.port = static_cast<std::uint16_t>(std::atoi(argv[i + 1]));
    else if (k == "--pairs") a.pairs = std::atoi(argv[i + 1]);
    else if (k == "--seconds") a.seconds = std::atof(argv[i + 1]);
    else if (k == "--rounds") a.rounds = std::atoi(argv[i + 1]);
    else if (k == "--in-flight") a.in_flight = std::atoi(argv[i + 1]);
    else if (k == "--only") a.only = argv[i + 1];
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.only == "lib-throughput") {
    std::printf("%.0f pairs/s\n", lib_throughput(a));
    return 0;
  }
  if (a.only == "raw-throughput") {
    std::printf("%.0f pairs/s\n", raw_throughput(a));
    return 0;
  }
  if (a.only == "lib-latency") {
    const auto l = lib_latency(a);
    std::printf("p50 %.1f us, p99 %.1f us\n", l.p50_us, l.p99_us);
    return 0;
  }
  std::printf("acquire+release on 127.0.0.1:%u: %d sequential pairs, %.1fs at %d in flight, "
              "%d alternating rounds (median reported)\n\n",
              a.port, a.pairs, a.seconds, a.in_flight, a.rounds);
  std::vector<double> raw_p50, raw_p99, lib_p50, lib_p99, raw_tp, lib_tp;
  for (int r = 0; r < a.rounds; ++r) {
    auto rl = raw_latency(a);
    auto ll = lib_latency(a);
    raw_p50.push_back(rl.p50_us), raw_p99.push_back(rl.p99_us);
    lib_p50.push_back(ll.p50_us), lib_p99.push_back(ll.p99_us);
    raw_tp.push_back(raw_throughput(a));
    lib_tp.push_back(lib_throughput(a));
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double rp50 = med(raw_p50), rp99 = med(raw_p99), lp50 = med(lib_p50), lp99 = med(lib_p99);
  const double rtp = med(raw_tp), ltp = med(lib_tp);
  std::printf("%-34s %14s %14s %8s\n", "metric", "raw hiredis", "redis_lock", "ratio");
  std::printf("%-34s %14.1f %14.1f %7.2fx\n", "latency p50 (us, acquire+release)", rp50, lp50, lp50 / rp50);
  std::printf("%-34s %14.1f %14.1f %7.2fx\n", "latency p99 (us, acquire+release)", rp99, lp99, lp99 / rp99);
  std::printf("%-34s %14.0f %14.0f %7.2fx\n", "throughput (pairs/s, 64 in flight)", rtp, ltp, ltp / rtp);
  std::printf("\nratios: latency is redis_lock/raw (lower is better, target <= 1.10); "
              "throughput is redis_lock/raw (higher is better, target >= 0.90)\n");
  return 0;
}

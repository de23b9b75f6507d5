// SPDX-License-Identifier: MIT
// What an idempotent request costs (IdempotentRequests, issue 50), beside the bare lock and a
// raw round trip measured in the same process, on the same server, in the same rounds (the
// order alternates; ratios are taken within a round; the table gives their median and
// range). One operation at a time on each side, so that like is compared with like:
//   raw       a blocking hiredis GET: one round trip, nothing else
//   lock      async_acquire + async_release of a fresh resource: the bare lock pair
//   new key   async_run of a key never seen, whose work answers at once: the look, the
//             lock, the begin, the decision, the release
//   replay    async_run of a decided key: the look alone
// and, per operation, the script calls the server ran (INFO commandstats before and after):
// the library's round trips (the raw GET is one, and no script).
//
//   idempotency_bench --port P [--quick]
#include <redis_lock/idempotency.hpp>

#include "raw_redis.hpp"
#include "stats.hpp"

#include <boost/asio/io_context.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "idempotency_bench: %s\n", what.c_str());
  std::exit(1);
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double p50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// The script calls the server ran so far (FCALL, FCALL_RO, EVALSHA, EVAL in INFO
/// commandstats): each is one round trip of the library's. (The commands a script runs are
/// counted in commandstats too, so a sum over every command would count those.)
long long script_calls(redisContext* c) {
  const auto info = bench::command(c, {"INFO", "commandstats"});
  long long total = 0;
  for (const char* name :
       {"cmdstat_fcall:", "cmdstat_fcall_ro:", "cmdstat_evalsha:", "cmdstat_eval:"}) {
    const auto at = info.find(name);
    if (at == std::string::npos) continue;
    const auto calls = info.find("calls=", at);
    if (calls != std::string::npos) total += std::atoll(info.c_str() + calls + 6);
  }
  return total;
}

enum Side { raw, lock, new_key, replay, sides };
constexpr const char* side_name[] = {"raw GET", "lock pair", "new key", "replay"};

struct Sample {
  double p50_us = 0;
  double scripts = 0;  // script calls (round trips) per operation
};

}  // namespace

int main(int argc, char** argv) {
  std::uint16_t port = 6379;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--port") && i + 1 < argc) {
      port = static_cast<std::uint16_t>(std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      fail("usage: idempotency_bench --port P [--quick]");
    }
  }
  const int rounds = quick ? 3 : 7;
  const int ops = quick ? 300 : 2000;
  const std::string stem = "idem_bench:" + std::to_string(::getpid()) + ":";

  asio::io_context io(1);
  redis_lock::ConnectionConfig cfg;
  cfg.port = port;
  redis_lock::LockManager locks(io.get_executor(), cfg);
  redis_lock::IdempotencyOptions options;
  options.unchecked_store = true;  // the benchmark's server is not durable
  redis_lock::IdempotentRequests requests(
      locks,
      [](const redis_lock::Attempt&, redis_lock::AttemptHandler done) {
        done(redis_lock::AttemptOutcome::unknown());
      },
      options);
  const redis_lock::AttemptFunction work = [](const redis_lock::Attempt&,
                                              redis_lock::AttemptHandler done) {
    done(redis_lock::AttemptOutcome::decided({201, "charged", "ch_1"}));
  };
  redisContext* c = bench::connect_or_exit(port);
  bench::command(c, {"SET", stem + "raw", "v"});

  // One operation of `side` number `i`, then `next`.
  const auto one = [&](Side side, int i, const std::string& round, std::function<void()> next) {
    switch (side) {
      case raw:
        bench::command(c, {"GET", stem + "raw"});
        return next();
      case lock:
        return locks.async_acquire(
            stem + "lock:" + round + std::to_string(i), {.ttl = 10s},
            [next](boost::system::error_code ec, redis_lock::LockGuard g) {
              if (ec || !g) fail("acquire: " + ec.message());
              g.async_release([next](boost::system::error_code ec2, bool ok) {
                if (ec2 || !ok) fail("release: " + ec2.message());
                next();
              });
            });
      case new_key:
      case replay:
        return requests.async_run(
            side == replay ? stem + "decided" : stem + "new" + round + std::to_string(i), "fp",
            work, [side, next](boost::system::error_code ec, redis_lock::RunResult r) {
              const auto want = side == replay ? redis_lock::RunResult::Kind::replayed
                                               : redis_lock::RunResult::Kind::executed;
              if (ec || r.kind != want) fail("run: " + ec.message());
              next();
            });
      case sides:
        break;
    }
  };
  const auto measure = [&](Side side, const std::string& round) {
    std::vector<double> us;
    const auto before = script_calls(c);
    int i = 0;
    std::function<void()> step = [&] {
      if (i == ops) return;
      const auto t0 = Clock::now();
      one(side, i++, round, [&, t0] {
        us.push_back(micros(Clock::now() - t0));
        step();
      });
    };
    step();
    io.restart();
    io.run();
    if (static_cast<int>(us.size()) != ops) fail("an operation did not complete");
    return Sample{p50(us), static_cast<double>(script_calls(c) - before) / ops};
  };

  // Warm: connections, the library, the decided key.
  measure(new_key, "warm");
  bool replay_ready = false;
  requests.async_run(stem + "decided", "fp", work,
                     [&](boost::system::error_code ec, redis_lock::RunResult) {
                       if (ec) fail("seed: " + ec.message());
                       replay_ready = true;
                     });
  io.restart();
  io.run();
  if (!replay_ready) fail("seed did not complete");

  std::vector<std::vector<double>> latency(sides), cmds(sides);
  std::vector<double> replay_vs_raw, replay_vs_lock, new_vs_lock;
  for (int r = 0; r < rounds; ++r) {
    Sample s[sides];
    const Side order[2][sides] = {{raw, lock, new_key, replay}, {replay, new_key, lock, raw}};
    for (const Side side : order[r % 2]) s[side] = measure(side, std::to_string(r) + ":");
    for (int k = 0; k < sides; ++k) {
      latency[k].push_back(s[k].p50_us);
      cmds[k].push_back(s[k].scripts);
    }
    replay_vs_raw.push_back(s[replay].p50_us / s[raw].p50_us);
    replay_vs_lock.push_back(s[replay].p50_us / s[lock].p50_us);
    new_vs_lock.push_back(s[new_key].p50_us / s[lock].p50_us);
  }
  std::printf("| one at a time, %d x %d ops | p50 us (median of rounds) | script calls per op |\n",
              rounds, ops);
  std::printf("|---|---|---|\n");
  for (int k = 0; k < sides; ++k) {
    std::printf("| %s | %.1f | %.2f |\n", side_name[k], bench::median(latency[k]),
                bench::median(cmds[k]));
  }
  const auto ratio = [](const char* what, const std::vector<double>& v) {
    const auto s = bench::spread(v);
    std::printf("%s: %.2fx (rounds %.2f-%.2f)\n", what, s.median, s.min, s.max);
  };
  std::printf("\n");
  ratio("replay / raw GET", replay_vs_raw);
  ratio("replay / lock pair", replay_vs_lock);
  ratio("new key / lock pair", new_vs_lock);
  redisFree(c);
  return 0;
}

// SPDX-License-Identifier: MIT
// Benchmark: contended hand-off. W waiters, each with its own LockManager (as W processes
// would have), want one resource; each holds it briefly and may not ask again until someone
// else has had it, so every acquisition is a hand-off. Measures the gap from a release being
// issued to the next owner's acquire completing, and the commands clients send per
// acquisition (SLOWLOG at threshold 0 counts client commands, not those inside scripts).
// Baseline in the same run: one raw hiredis acquire+release pair (the same scripts).
//
//   handoff_bench [--port N] [--waiters W] [--handoffs H]
#include <redis_lock/redis_lock.hpp>

#include "keys.hpp"
#include "redis_lock_scripts.hpp"
#include "token.hpp"
#include "raw_redis.hpp"

#include <boost/asio/io_context.hpp>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace detail = redis_lock::detail;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct Args {
  std::uint16_t port = 6379;
  int waiters = 8;
  int handoffs = 2000;
};

using bench::command;

/// Commands sent by clients since the last SLOWLOG RESET (threshold 0). Redis 7 also logs
/// the commands a script runs, under the pseudo-client "?:0": those are left out, and so are
/// this program's own SLOWLOG/CONFIG calls.
long client_commands_in_slowlog(redisContext* c) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "SLOWLOG GET -1"));
  long n = 0;
  if (r != nullptr && r->type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 5) continue;
      const redisReply* args = e->element[3];
      const redisReply* addr = e->element[4];
      if (addr->type == REDIS_REPLY_STRING && std::string(addr->str, addr->len) == "?:0") continue;
      if (args->type == REDIS_REPLY_ARRAY && args->elements > 0) {
        std::string name(args->element[0]->str, args->element[0]->len);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        if (name == "slowlog" || name == "config") continue;
      }
      ++n;
    }
  }
  if (r != nullptr) freeReplyObject(r);
  return n;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

/// p50 of one raw acquire+release pair: the same scripts with the same arguments.
double raw_pair_p50_us(std::uint16_t port, int pairs) {
  redisContext* c = bench::connect_or_exit(port);
  for (const auto* s : {&detail::acquire_script, &detail::release_script}) {
    command(c, {"SCRIPT", "LOAD", std::string(s->body)});
  }
  const auto keys = detail::make_keys("lock:", "bench:handoff:raw");
  const std::string member_suffix = "0123456789abcdef";
  std::vector<double> us;
  for (int i = 0; i < pairs; ++i) {
    const auto t0 = Clock::now();
    const auto token = detail::random_token();
    command(c, {"EVALSHA", std::string(detail::acquire_script.sha1), "4", keys.lease, keys.fence,
                keys.queue, keys.queue_expiry, token, "10000", "1", "2000", member_suffix});
    command(c, {"EVALSHA", std::string(detail::release_script.sha1), "3", keys.lease, keys.queue,
                keys.queue_expiry, token, "lock:notify:", "1000", token + member_suffix});
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  redisFree(c);
  return percentile(us, 0.5);
}

struct Result {
  std::vector<double> gaps_us;
  long commands = 0;
  int acquisitions = 0;
};

Result run_handoffs(const Args& a) {
  asio::io_context io(1);
  redis_lock::ConnectionConfig cfg;
  cfg.port = a.port;
  std::vector<std::unique_ptr<redis_lock::LockManager>> managers;
  for (int i = 0; i < a.waiters; ++i) {
    managers.push_back(std::make_unique<redis_lock::LockManager>(io.get_executor(), cfg));
  }
  Result result;
  Clock::time_point released_at{};
  int last_owner = -1;
  std::vector<bool> parked(a.waiters, false);  // waiting for someone else to have had it
  std::function<void(int)> want;
  auto unpark_others = [&](int owner) {
    for (int i = 0; i < a.waiters; ++i) {
      if (i != owner && parked[i]) {
        parked[i] = false;
        want(i);
      }
    }
  };
  want = [&](int i) {
    managers[i]->async_acquire(
        "bench:handoff", {.ttl = 10s, .wait = 30s},
        [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
          if (ec || !g) {
            std::fprintf(stderr, "acquire failed: %s\n", ec.message().c_str());
            std::exit(1);
          }
          const auto now = Clock::now();
          if (last_owner >= 0) {
            result.gaps_us.push_back(
                std::chrono::duration<double, std::micro>(now - released_at).count());
          }
          last_owner = i;
          ++result.acquisitions;
          unpark_others(i);
          auto guard = std::make_shared<redis_lock::LockGuard>(std::move(g));
          released_at = Clock::now();
          guard->async_release([&, i, guard](boost::system::error_code, bool) {
            if (result.acquisitions >= a.handoffs) return;
            parked[i] = true;  // may ask again once someone else has had it
            if (last_owner != i) unpark_others(last_owner);
          });
        });
  };
  for (int i = 0; i < a.waiters; ++i) want(i);
  io.run();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--port") a.port = static_cast<std::uint16_t>(std::atoi(argv[i + 1]));
    else if (k == "--waiters") a.waiters = std::atoi(argv[i + 1]);
    else if (k == "--handoffs") a.handoffs = std::atoi(argv[i + 1]);
  }
  redisContext* admin = bench::connect_or_exit(a.port);
  const double raw_p50 = raw_pair_p50_us(a.port, 2000);

  command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  command(admin, {"CONFIG", "SET", "slowlog-max-len", "10000000"});
  command(admin, {"SLOWLOG", "RESET"});
  const Result r = run_handoffs(a);
  const long logged = client_commands_in_slowlog(admin);
  command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  command(admin, {"CONFIG", "SET", "slowlog-max-len", "128"});
  redisFree(admin);

  const double p50 = percentile(r.gaps_us, 0.5), p99 = percentile(r.gaps_us, 0.99);
  const double per_acq = static_cast<double>(logged) / r.acquisitions;
  std::printf("hand-off with %d waiters (one LockManager each), %d acquisitions\n\n", a.waiters,
              r.acquisitions);
  std::printf("%-46s %10s\n", "metric", "value");
  std::printf("%-46s %10.1f\n", "raw acquire+release pair p50 (us)", raw_p50);
  std::printf("%-46s %10.1f\n", "hand-off gap p50 (us, release -> next owner)", p50);
  std::printf("%-46s %10.1f\n", "hand-off gap p99 (us)", p99);
  std::printf("%-46s %9.2fx\n", "gap p50 / raw pair p50 (target <= 1.5)", p50 / raw_p50);
  std::printf("%-46s %10.2f\n", "client commands per acquisition (target <= 3)", per_acq);
  return 0;
}

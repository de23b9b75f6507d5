// SPDX-License-Identifier: MIT
// One idempotency soak process: runs each of KEYS request keys DUPLICATES times (in a
// shuffled order, so that the processes' duplicates of a key meet), through
// IdempotentRequests on the server at PORT. The work is a side effect that is not
// idempotent: it increments the key's effect counter and writes down its downstream key's
// charge (the "downstream", one script); resolve looks the downstream key up. With
// probability CRASH_PERMILLE/1000 the process kills itself (SIGKILL) inside a work call,
// before the effect or after it (before its answer), as a crash would.
//
//   idempotency_soak_worker PORT PREFIX KEYS DUPLICATES SEED CRASH_PERMILLE run|finish [NTH]
// With NTH > 0 it also dies at its NTH work call (before the effect if NTH is odd, after it
// if even). Prints one line per answer: "<key> <result> <body>", then "done". `finish`: no
// crash; the reconciler's rounds until nothing is due, then each key asked (waiting for its
// lock) until it is decided. Exit 0, or 1 on an error.
#include "raw_redis.hpp"

#include <redis_lock/idempotency.hpp>

#include <hiredis/hiredis.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redis_lock::AttemptOutcome;

namespace {

// The downstream: its effect (the counter) and its record of the downstream key, at once.
constexpr const char* charge = R"lua(
redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
)lua";

struct Redis {
  redisContext* c;
  explicit Redis(int port) : c(redisConnect("127.0.0.1", port)) {
    if (!c || c->err) {
      std::fprintf(stderr, "cannot connect\n");
      std::exit(1);
    }
  }
  ~Redis() { redisFree(c); }
  std::string run(const std::vector<std::string>& words) {
    const auto r = redis_lock::test::raw_command(c, words);
    if (!r || r->type == REDIS_REPLY_ERROR) {
      std::fprintf(stderr, "downstream: %s\n", r && r->str ? r->str : "no reply");
      std::exit(1);
    }
    return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "";
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: idempotency_soak_worker PORT PREFIX KEYS DUPLICATES SEED "
                 "CRASH_PERMILLE [finish]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string prefix = argv[2];
  const int keys = std::atoi(argv[3]);
  const int duplicates = std::atoi(argv[4]);
  std::mt19937 rng(static_cast<unsigned>(std::atoi(argv[5])));
  const bool finish = argc > 7 && std::string(argv[7]) == "finish";
  const int crash_permille = finish ? 0 : std::atoi(argv[6]);
  const int nth = finish || argc <= 8 ? 0 : std::atoi(argv[8]);
  int work_calls = 0;
  Redis downstream(port);
  const auto effects = [&](const std::string& key) { return prefix + "effects:{" + key + "}"; };
  const auto charges = prefix + "charges";

  asio::io_context io;
  redis_lock::ConnectionConfig cfg;
  cfg.port = static_cast<std::uint16_t>(port);
  redis_lock::ManagerOptions manager;
  manager.key_prefix = prefix;
  redis_lock::LockManager locks(io.get_executor(), cfg, manager);
  redis_lock::IdempotencyOptions options;
  options.unchecked_store = true;  // a test server
  options.lease = 1500ms;
  options.margin = 300ms;
  options.first_look = 300ms;
  options.wait = finish ? 3s : 0ms;
  redis_lock::IdempotentRequests requests(
      locks,
      [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
        const auto kept = downstream.run({"HGET", charges, a.downstream_key});
        done(kept.empty() ? AttemptOutcome::not_executed()
                          : AttemptOutcome::decided({201, kept, kept}));
      },
      options);
  const auto crash_now = [&] {
    return crash_permille > 0 && static_cast<int>(rng() % 1000) < crash_permille;
  };
  const redis_lock::AttemptFunction work = [&](const redis_lock::Attempt& a,
                                               redis_lock::AttemptHandler done) {
    ++work_calls;
    const bool nth_call = work_calls == nth;
    if (crash_now() || (nth_call && nth % 2 == 1)) ::kill(::getpid(), SIGKILL);  // before
    const auto id = "charge:" + a.downstream_key + ":" + std::to_string(::getpid());
    downstream.run({"EVAL", charge, "2", effects(a.key), charges, a.downstream_key, id});
    // After the effect, before the answer:
    if (crash_now() || (nth_call && nth % 2 == 0)) ::kill(::getpid(), SIGKILL);
    done(AttemptOutcome::decided({201, id, id}));
  };

  std::vector<std::string> plan;
  for (int k = 0; k < keys; ++k) {
    for (int d = 0; d < (finish ? 1 : duplicates); ++d) plan.push_back("key" + std::to_string(k));
  }
  std::shuffle(plan.begin(), plan.end(), rng);
  int failures = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // The finisher: the reconciler first, past the crashed attempts' looks.
        for (int round = 0; finish && round < 40; ++round) {
          asio::steady_timer t(io, 400ms);
          co_await t.async_wait(asio::use_awaitable);
          auto [ec, report] =
              co_await requests.async_reconcile(asio::as_tuple(asio::use_awaitable));
          std::printf(
              "reconciled: looked %zu, decided %zu, voided %zu, pending %zu, busy %zu, failed "
              "%zu\n",
              report.looked, report.decided, report.voided, report.pending, report.busy,
              report.failed);
          if (ec || report.looked == 0) break;
        }
        for (const auto& key : plan) {
          for (int tries = 0;; ++tries) {
            auto [ec, r] =
                co_await requests.async_run(key, "fp", work, asio::as_tuple(asio::use_awaitable));
            if (ec) {
              std::printf("%s error %s\n", key.c_str(), ec.message().c_str());
              ++failures;
              break;
            }
            std::printf("%s %s %s\n", key.c_str(), redis_lock::run_result_name(r.kind),
                        r.response.body.c_str());
            std::fflush(stdout);
            const bool decided = r.kind == redis_lock::RunResult::Kind::executed ||
                                 r.kind == redis_lock::RunResult::Kind::replayed;
            if (!finish || decided || tries == 40) break;
            asio::steady_timer t(io, 100ms);
            co_await t.async_wait(asio::use_awaitable);
          }
        }
      },
      asio::detached);
  io.run();
  std::printf("done\n");
  return failures == 0 ? 0 : 1;
}

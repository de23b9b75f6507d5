// SPDX-License-Identifier: MIT
// One soak process for the other kinds of lock: ROUNDS times, take the lock (waiting), then
// do under it what would go wrong without it, on a "data server" (the same Redis, other
// keys), through a plain hiredis connection of its own.
//
//   kinds_soak_worker semaphore PORT RESOURCE ROUNDS TTL_MS LIMIT
//     under a permit: enter the holders' set (each entry expires with the holder's lease,
//     so a killed holder leaves it when its permit may be granted again), record the
//     largest number of holders ever seen at once, pause, leave
//   kinds_soak_worker rw PORT RESOURCE ROUNDS TTL_MS
//     a writer (1 round in 4) rewrites a two-field record one field at a time, with a pause
//     between; a reader reads it twice with a pause between: a writer beside a reader shows
//     as a record that changed under the reader (counted), or a half-written one
//   kinds_soak_worker transfer PORT RESOURCE ROUNDS TTL_MS ACCOUNTS
//     async_acquire_all of two accounts (in either order), read both balances, pause, write
//     both at once (MSET): two overlapping transfers lose an update, and the sum changes
// Prints "round N" after each round, "done" at the end; exit 0, or 1 on an error.
#include "raw_redis.hpp"

#include <redis_lock/redis_lock.hpp>

#include <hiredis/hiredis.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Enters the holders' set: drops entries whose lease has ended (a killed holder's), adds
// ours until our lease ends on the server (its score in the lease set KEYS[3], member
// ARGV[2]), and keeps the largest count seen.
constexpr const char* enter = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local ends = redis.call('ZSCORE', KEYS[3], ARGV[2])
if not ends then return -1 end
redis.call('ZADD', KEYS[1], ends, ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
)lua";

struct Redis {
  redisContext* c;
  explicit Redis(int port) : c(redisConnect("127.0.0.1", port)) {
    if (!c || c->err) throw std::runtime_error("cannot connect");
  }
  ~Redis() { redisFree(c); }
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;
  /// The reply as text (an integer's digits; "" for nil).
  std::string text(const std::vector<std::string>& args) {
    const auto r = redis_lock::test::raw_command(c, args);
    if (!r) throw std::runtime_error("redis: connection");
    std::string out;
    if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out.assign(r->str, r->len);
    const bool error = r->type == REDIS_REPLY_ERROR;
    if (error) out.assign(r->str, r->len);
    if (error) throw std::runtime_error("redis: " + out);
    return out;
  }
  long long number(const std::vector<std::string>& args) {
    const auto t = text(args);
    return t.empty() ? 0 : std::stoll(t);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: kinds_soak_worker semaphore|rw|transfer PORT RESOURCE ROUNDS "
                 "TTL_MS [LIMIT|ACCOUNTS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int port = std::atoi(argv[2]);
  const std::string resource = argv[3];
  const int rounds = std::atoi(argv[4]);
  const auto ttl = std::chrono::milliseconds(std::atoll(argv[5]));
  const int extra = argc > 6 ? std::atoi(argv[6]) : 0;
  const std::string data = "soak:{" + resource + "}:";
  const std::string me = std::to_string(::getpid());

  asio::io_context io;
  redis_lock::ConnectionConfig cfg;
  cfg.port = static_cast<std::uint16_t>(port);
  redis_lock::LockManager locks(io.get_executor(), cfg);
  int status = 1;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        Redis redis(port);
        std::minstd_rand rng(std::random_device{}());
        asio::steady_timer pause(io);
        const auto nap = [&](int max_us) -> asio::awaitable<void> {
          pause.expires_after(std::chrono::microseconds(rng() % static_cast<unsigned>(max_us)));
          co_await pause.async_wait(asio::use_awaitable);
        };
        int failures = 0;
        const redis_lock::LockOptions options{.ttl = ttl, .wait = 60s};
        for (int round = 1; round <= rounds; ++round) {
          // The lock's own connection may fail under us: try again.
          boost::system::error_code ec;
          std::vector<redis_lock::LockGuard> guards;
          bool writer = false;
          if (mode == "semaphore") {
            auto [e, g] =
                co_await locks.async_acquire_permit(resource, static_cast<std::uint32_t>(extra),
                                                    options, asio::as_tuple(asio::use_awaitable));
            ec = e;
            guards.push_back(std::move(g));
          } else if (mode == "rw") {
            // (No co_await inside ?: : GCC 12 destroys its result twice.)
            writer = rng() % 4 == 0;
            std::tuple<boost::system::error_code, redis_lock::LockGuard> got;
            if (writer) {
              got = co_await locks.async_acquire_exclusive(resource, options,
                                                           asio::as_tuple(asio::use_awaitable));
            } else {
              got = co_await locks.async_acquire_shared(resource, options,
                                                        asio::as_tuple(asio::use_awaitable));
            }
            ec = std::get<0>(got);
            guards.push_back(std::move(std::get<1>(got)));
          } else if (mode == "transfer") {
            const int from = static_cast<int>(rng() % static_cast<unsigned>(extra));
            const int to =
                (from + 1 + static_cast<int>(rng() % static_cast<unsigned>(extra - 1))) % extra;
            std::vector<std::string> accounts = {resource + ":account:" + std::to_string(from),
                                                 resource + ":account:" + std::to_string(to)};
            auto [e, g] = co_await locks.async_acquire_all(accounts, options,
                                                           asio::as_tuple(asio::use_awaitable));
            ec = e;
            guards = std::move(g);
          } else {
            throw std::runtime_error("unknown mode " + mode);
          }
          if (ec) {
            if (++failures > 1000) throw std::runtime_error("too many errors: " + ec.message());
            --round;
            continue;
          }
          if (guards.empty() || !guards.front()) throw std::runtime_error("not acquired in 60 s");
          const std::string lease_key = "lock:{" + resource + "}";
          // A holder whose lease ran out (a stall longer than the ttl) writes nothing more:
          // that is the protected resource's job (fencing), not the lock's; counted apart.
          const auto still_mine = [&] {
            const bool valid = std::chrono::steady_clock::now() < guards.front().valid_until();
            if (!valid) redis.number({"INCR", data + "lapsed"});
            return valid;
          };

          if (mode == "semaphore") {
            redis.number({"EVAL", enter, "3", data + "holders", data + "peak", lease_key, me,
                          guards.front().token() + "s"});
            co_await nap(3000);
            redis.number({"ZREM", data + "holders", me});
          } else if (mode == "rw" && writer) {
            const auto v = std::to_string(guards.front().fencing_token());
            if (still_mine()) redis.text({"SET", data + "a", v});
            co_await nap(2000);
            if (still_mine()) redis.text({"SET", data + "b", v});
            redis.number({"INCR", data + "writes"});
          } else if (mode == "rw") {
            // Readers enter a holders' set too: that they do share is part of the test.
            redis.number({"EVAL", enter, "3", data + "readers", data + "readers_peak", lease_key,
                          me, guards.front().token() + "s"});
            const auto a1 = redis.text({"GET", data + "a"});
            const auto b1 = redis.text({"GET", data + "b"});
            co_await nap(2000);
            const auto a2 = redis.text({"GET", data + "a"});
            const auto b2 = redis.text({"GET", data + "b"});
            redis.number({"ZREM", data + "readers", me});
            if (still_mine()) {
              if (a1 != a2 || b1 != b2) redis.number({"INCR", data + "changed"});
              if (a1 != b1) redis.number({"INCR", data + "half"});
            }
            redis.number({"INCR", data + "reads"});
          } else {
            const auto& from = guards[0].resource();
            const auto& to = guards[1].resource();
            const auto a = redis.number({"GET", data + from});
            const auto b = redis.number({"GET", data + to});
            co_await nap(2000);
            const auto amount = static_cast<long long>(rng() % 100);
            if (still_mine()) {
              redis.text({"MSET", data + from, std::to_string(a - amount), data + to,
                          std::to_string(b + amount)});
            }
            redis.number({"INCR", data + "transfers"});
          }
          // A failed release (a connection failure) is left to the ttl.
          for (auto& g : guards) co_await g.async_release(asio::as_tuple(asio::use_awaitable));
          std::printf("round %d\n", round);
          std::fflush(stdout);
        }
        std::printf("done\n");
        status = 0;
      },
      [&](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "kinds_soak_worker: %s\n", ex.what());
        }
      });
  io.run();
  return status;
}

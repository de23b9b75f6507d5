// SPDX-License-Identifier: MIT
// One nemesis worker (issue 51): the library's public API, as a service uses it, writing a
// history line for every invoke and outcome, timed with steady_clock (one clock for every
// process on this machine: CLOCK_MONOTONIC). Until SECONDS pass: take the lock on RESOURCE
// (auto-renewed, waiting up to 3 s), write its fencing token to a fenced register on an
// independent server (a script that accepts only a token above the highest it saw), hold a
// while, release.
//
//   nemesis_worker LOCK_URL REGISTER_PORT RESOURCE TTL_MS SECONDS HISTORY_FILE
// (LOCK_URL as ConnectionConfig::from_url reads it: standalone, redis+cluster://, ...)
//
// History lines: '<steady ns> <event> <fields>':
//   acquire invoke | acquire ok <fence> <valid until ns> | acquire none | acquire fail <error>
//   write ok <fence> | write refused <fence> | write fail <error>
//   release invoke <fence> <lost 0|1> <valid until ns> | release ok <0|1> | release fail <error>
#include <redis_lock/redis_lock.hpp>

#include <hiredis/hiredis.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The fenced register: keeps the highest token it accepted, refuses any other.
constexpr const char* fenced_write = R"lua(
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
)lua";

long long ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

class History {
 public:
  explicit History(const char* path) : f_(std::fopen(path, "w")) {
    if (f_ == nullptr) throw std::runtime_error("cannot write the history");
  }
  ~History() { std::fclose(f_); }
  History(const History&) = delete;
  History& operator=(const History&) = delete;
  void line(const std::string& text) { line_at(Clock::now(), text); }
  /// A line stamped `at`: a time read before what the line reports was looked at.
  void line_at(Clock::time_point at, const std::string& text) {
    std::fprintf(f_, "%lld %s\n", ns(at), text.c_str());
    std::fflush(f_);  // a SIGKILL loses nothing written
  }

 private:
  FILE* f_;
};

/// An error's name for the history: its message, spaces kept (the line's last field).
std::string named(const boost::system::error_code& ec) {
  return ec.category().name() + std::string(":") + std::to_string(ec.value()) + " " + ec.message();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr,
                 "usage: nemesis_worker LOCK_URL REGISTER_PORT RESOURCE TTL_MS SECONDS FILE\n");
    return 2;
  }
  auto cfg = redis_lock::ConnectionConfig::from_url(argv[1]);
  if (!cfg) {
    std::fprintf(stderr, "nemesis_worker: %s\n", cfg.error().message().c_str());
    return 2;
  }
  const int register_port = std::atoi(argv[2]);
  const std::string resource = argv[3];
  const auto ttl = std::chrono::milliseconds(std::atoll(argv[4]));
  const auto until = Clock::now() + std::chrono::seconds(std::atoll(argv[5]));
  History history(argv[6]);

  asio::io_context io;
  cfg->connect_timeout = 300ms;
  cfg->command_timeout = 300ms;
  redis_lock::LockManager locks(io.get_executor(), *cfg);
  redisContext* reg = redisConnectWithTimeout("127.0.0.1", register_port, timeval{1, 0});
  if (reg == nullptr || reg->err) return 3;
  const timeval limit{1, 0};
  redisSetTimeout(reg, limit);
  const std::string key = "nemesis:{" + resource + "}:register";

  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::minstd_rand rng(std::random_device{}());
        asio::steady_timer timer(io);
        while (Clock::now() < until) {
          history.line("acquire invoke");
          auto [ec, guard] =
              co_await locks.async_acquire(resource, {.ttl = ttl, .wait = 3s, .auto_renew = true},
                                           asio::as_tuple(asio::use_awaitable));
          if (ec) {
            history.line("acquire fail " + named(ec));
            timer.expires_after(50ms);  // an outage: do not spin
            co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
            continue;
          }
          if (!guard) {
            history.line("acquire none");
            continue;
          }
          const auto fence = std::to_string(guard.fencing_token());
          history.line("acquire ok " + fence + " " + std::to_string(ns(guard.valid_until())));
          auto* r = static_cast<redisReply*>(
              redisCommand(reg, "EVAL %s 1 %s %s", fenced_write, key.c_str(), fence.c_str()));
          if (r == nullptr) {
            // The register is not under test: give the lock back and stop.
            history.line(std::string("write fail ") + reg->errstr);
            history.line("release invoke " + fence + " 0 " +
                         std::to_string(ns(guard.valid_until())));
            co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
            history.line("release ok 0");
            co_return;
          }
          history.line(
              (r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? "write ok " : "write refused ") +
              fence);
          freeReplyObject(r);
          timer.expires_after(std::chrono::milliseconds(50 + rng() % 350));
          co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
          // The time first, then what the guard says: lost() must be true if that time is past
          // valid_until() (it reads the clock itself).
          const auto at = Clock::now();
          const bool lost = guard.lost();
          const auto valid = guard.valid_until();
          history.line_at(at, "release invoke " + fence + " " + (lost ? "1 " : "0 ") +
                                  std::to_string(ns(valid)));
          auto [rec, released] = co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
          history.line(rec ? "release fail " + named(rec)
                           : std::string("release ok ") + (released ? "1" : "0"));
        }
      },
      [&](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          history.line(std::string("crash ") + ex.what());
        }
      });
  io.run();
  redisFree(reg);
  history.line("done");
  return 0;
}

// SPDX-License-Identifier: MIT
// One soak process: ROUNDS times, take the lock on RESOURCE (waiting), then under it do a
// deliberately non-atomic read-modify-write of a counter (GET, a pause, SET) and a fenced
// write that the "protected resource" (a Lua script) accepts only with a token above the last
// one it saw. Any overlap of two holders shows up as a lost update or a refused fence.
//
//   soak_worker PORT RESOURCE ROUNDS TTL_MS
// Prints "round N" after each round, "done" at the end; exit 0, or 1 on an error.
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
#include <string>

#include <unistd.h>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// The protected resource: remembers the highest fencing token it accepted; refuses lower or
// equal ones (counting them) and logs each accepted write in order.
constexpr const char* fenced_write = R"lua(
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= last then
  redis.call('INCR', KEYS[2])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[3], ARGV[1] .. ':' .. ARGV[2])
return 1
)lua";

struct Redis {
  redisContext* c;
  explicit Redis(int port) : c(redisConnect("127.0.0.1", port)) {
    if (!c || c->err) throw std::runtime_error("cannot connect");
  }
  ~Redis() { redisFree(c); }
  long long integer(const char* fmt, auto... args) {
    auto* r = static_cast<redisReply*>(redisCommand(c, fmt, args...));
    if (!r) throw std::runtime_error("redis: connection");
    long long v = 0;
    if (r->type == REDIS_REPLY_INTEGER) v = r->integer;
    if (r->type == REDIS_REPLY_STRING) v = std::atoll(r->str);
    const bool error = r->type == REDIS_REPLY_ERROR;
    freeReplyObject(r);
    if (error) throw std::runtime_error("redis: error reply");
    return v;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: soak_worker PORT RESOURCE ROUNDS TTL_MS\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string resource = argv[2];
  const int rounds = std::atoi(argv[3]);
  const auto ttl = std::chrono::milliseconds(std::atoll(argv[4]));
  const std::string counter = "soak:{" + resource + "}:counter";
  const std::string fence = "soak:{" + resource + "}:fence";
  const std::string refused = "soak:{" + resource + "}:refused";
  const std::string log = "soak:{" + resource + "}:log";
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
        int failures = 0;
        for (int round = 1; round <= rounds; ++round) {
          // The lock's own connection may be killed under us: an error is a reason to try again
          // (the library gives back whatever the failed attempt may have taken).
          auto [ec, guard] = co_await locks.async_acquire(resource, {.ttl = ttl, .wait = 60s},
                                                          asio::as_tuple(asio::use_awaitable));
          if (ec) {
            if (++failures > 1000) throw std::runtime_error("too many errors: " + ec.message());
            --round;
            continue;
          }
          if (!guard) throw std::runtime_error("not acquired within 60 s");
          const long long seen = redis.integer("GET %s", counter.c_str());
          pause.expires_after(std::chrono::microseconds(rng() % 2000));  // widen any race
          co_await pause.async_wait(asio::use_awaitable);
          redis.integer("SET %s %lld", counter.c_str(), seen + 1);
          const auto token = std::to_string(guard.fencing_token());
          redis.integer("EVAL %s 3 %s %s %s %s %s", fenced_write, fence.c_str(), refused.c_str(),
                        log.c_str(), token.c_str(), me.c_str());
          // A failed release (connection killed) is left to the ttl.
          co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
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
          std::fprintf(stderr, "soak_worker: %s\n", ex.what());
        }
      });
  io.run();
  return status;
}

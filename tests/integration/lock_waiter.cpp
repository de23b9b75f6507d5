// SPDX-License-Identifier: MIT
// A process with one LockManager and N concurrent waiting acquires on one resource. Each,
// once it has the lock, holds it HOLD_MS and releases it, printing
// "<fencing token> <steady ns at acquire> <steady ns before release>" per acquisition.
//   lock_waiter PORT RESOURCE N HOLD_MS WAIT_MS [TTL_MS]   (ttl: 10 s by default)
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace asio = boost::asio;

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: lock_waiter PORT RESOURCE N HOLD_MS WAIT_MS [TTL_MS]\n");
    return 2;
  }
  asio::io_context io;
  redis_lock::ConnectionConfig cfg;
  cfg.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
  redis_lock::LockManager locks(io.get_executor(), cfg);
  const std::string resource = argv[2];
  const int n = std::atoi(argv[3]);
  const auto hold = std::chrono::milliseconds(std::atoll(argv[4]));
  const auto wait = std::chrono::milliseconds(std::atoll(argv[5]));
  const auto ttl = std::chrono::milliseconds(argc == 7 ? std::atoll(argv[6]) : 10'000);
  int failures = 0;
  auto now_ns = [] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count());
  };
  for (int i = 0; i < n; ++i) {
    locks.async_acquire(resource, {.ttl = ttl, .wait = wait},
                        [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                          if (ec || !g) {
                            std::fprintf(stderr, "not acquired: %s\n", ec.message().c_str());
                            ++failures;
                            return;
                          }
                          const long long start = now_ns();
                          auto timer = std::make_shared<asio::steady_timer>(io, hold);
                          auto guard = std::make_shared<redis_lock::LockGuard>(std::move(g));
                          timer->async_wait([&, timer, guard, start](boost::system::error_code) {
                            std::printf("%llu %lld %lld\n",
                                        static_cast<unsigned long long>(guard->fencing_token()),
                                        start, now_ns());
                            std::fflush(stdout);
                            guard->async_release([&](boost::system::error_code rec, bool ok) {
                              if (rec || !ok) ++failures;
                            });
                          });
                        });
  }
  io.run();
  return failures == 0 ? 0 : 1;
}

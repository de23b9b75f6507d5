// SPDX-License-Identifier: MIT
// A process that takes one lock, prints its fencing token and then hangs until killed:
// the tests kill it with SIGKILL to show that a dead holder's lease expires.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: lock_holder PORT RESOURCE TTL_MS\n");
    return 2;
  }
  boost::asio::io_context io;
  redis_lock::ConnectionConfig cfg;
  cfg.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
  redis_lock::LockManager locks(io.get_executor(), cfg);
  redis_lock::LockGuard held;
  locks.async_acquire(argv[2], {.ttl = std::chrono::milliseconds(std::atoll(argv[3]))},
                      [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                        if (ec || !g) {
                          std::printf("failed %s\n", ec.message().c_str());
                          std::exit(1);
                        }
                        std::printf("%llu\n", static_cast<unsigned long long>(g.fencing_token()));
                        std::fflush(stdout);
                        held = std::move(g);
                      });
  io.run();
  for (;;) ::pause();  // hold the lease until SIGKILL
}

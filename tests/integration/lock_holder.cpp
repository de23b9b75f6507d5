// SPDX-License-Identifier: MIT
// A process that takes one lock (a mutex, or with KIND a semaphore's permit "permit:N", a
// read-write lock's "shared" or "exclusive" hold, or "leader:VALUE" the leadership of the
// election RESOURCE, renewed), prints its fencing token and then hangs
// until killed: the tests kill it with SIGKILL to show that a dead holder's lease expires.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: lock_holder PORT RESOURCE TTL_MS [KIND]\n");
    return 2;
  }
  const std::string kind = argc == 5 ? argv[4] : "mutex";
  boost::asio::io_context io;
  redis_lock::ConnectionConfig cfg;
  cfg.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
  redis_lock::LockManager locks(io.get_executor(), cfg);
  redis_lock::LockGuard held;
  const redis_lock::LockOptions options{.ttl = std::chrono::milliseconds(std::atoll(argv[3]))};
  auto done = [&](boost::system::error_code ec, redis_lock::LockGuard g) {
    if (ec || !g) {
      std::printf("failed %s\n", ec.message().c_str());
      std::exit(1);
    }
    std::printf("%llu\n", static_cast<unsigned long long>(g.fencing_token()));
    std::fflush(stdout);
    held = std::move(g);
  };
  if (kind.rfind("permit:", 0) == 0) {
    const auto limit = static_cast<std::uint32_t>(std::atol(kind.c_str() + 7));
    locks.async_acquire_permit(argv[2], limit, options, done);
  } else if (kind.rfind("leader:", 0) == 0) {
    // argv[2] is then the election's name; its leadership is renewed until the kill.
    redis_lock::Election election(locks, argv[2]);
    election.async_campaign(kind.substr(7), options, done);
  } else if (kind == "shared") {
    locks.async_acquire_shared(argv[2], options, done);
  } else if (kind == "exclusive") {
    locks.async_acquire_exclusive(argv[2], options, done);
  } else {
    locks.async_acquire(argv[2], options, done);
  }
  io.run();
  for (;;) ::pause();  // hold the lease until SIGKILL
}

// SPDX-License-Identifier: MIT
// The same lock with plain callbacks: acquire, extend, release.
//
//   callbacks [redis://127.0.0.1:6379]     (or set REDIS_LOCK_URL)
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  const char* env = std::getenv("REDIS_LOCK_URL");
  auto config = redis_lock::ConnectionConfig::from_url(argc > 1 ? argv[1]
                                                       : env    ? env
                                                                : "redis://127.0.0.1:6379");
  if (!config) return 2;

  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), *config);
  int status = 1;
  redis_lock::LockGuard held;  // outlives the callbacks that use it
  locks.async_acquire("report:daily", {.ttl = 30s},
                      [&](boost::system::error_code ec, redis_lock::LockGuard guard) {
                        if (ec) {
                          std::printf("could not ask Redis: %s\n", ec.message().c_str());
                          return;
                        }
                        if (!guard) {
                          std::printf("another node is building the report\n");
                          status = 0;
                          return;
                        }
                        std::printf("building the report under fencing token %llu\n",
                                    static_cast<unsigned long long>(guard.fencing_token()));
                        held = std::move(guard);
                        // Need more time? Extend the lease.
                        held.async_extend(60s, [&](boost::system::error_code ec2, bool extended) {
                          std::printf("extended: %s\n", !ec2 && extended ? "yes" : "no");
                          held.async_release([&](boost::system::error_code ec3, bool released) {
                            std::printf("released: %s\n", !ec3 && released ? "yes" : "no");
                            status = !ec3 && released ? 0 : 1;
                          });
                        });
                      });
  io.run();  // returns when nothing is left to do: an idle manager holds no work
  return status;
}

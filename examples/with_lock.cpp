// SPDX-License-Identifier: MIT
// async_with_lock: take the lock, run work that is cancelled if the lock is lost, release,
// and learn whether the work finished under a valid lease. Here a job is protected that
// every node of a fleet would otherwise start at the same minute.
//
//   with_lock [redis://127.0.0.1:6379]     (or set REDIS_LOCK_URL)
#include <redis_lock/redis_lock.hpp>
#include <redis_lock/with_lock.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

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

  // The work: bound to the guard's lost signal by with_lock, so its timer (standing in for
  // real I/O) is cancelled the moment renewal fails. The lease is renewed while it runs,
  // though the work takes three ttls.
  auto cleanup_job = [](const redis_lock::LockGuard& guard) -> asio::awaitable<void> {
    std::printf("cleanup job runs under fencing token %llu\n",
                static_cast<unsigned long long>(guard.fencing_token()));
    asio::steady_timer step(co_await asio::this_coro::executor, 600ms);
    co_await step.async_wait(asio::use_awaitable);
  };
  int status = 1;
  redis_lock::async_with_lock(locks, "cron:cleanup", {.ttl = 200ms}, cleanup_job,
                              [&](std::exception_ptr failure, boost::system::error_code ec) {
                                if (failure) {
                                  std::puts("the job threw");
                                } else if (ec == redis_lock::error::not_acquired) {
                                  std::puts("another node runs the job");
                                  status = 0;
                                } else if (ec) {
                                  std::printf("not done under the lock: %s\n",
                                              ec.message().c_str());
                                } else {
                                  std::puts("job done while the lock was held all along");
                                  status = 0;
                                }
                              });
  io.run();
  return status;
}

// SPDX-License-Identifier: MIT
// Blocking code (a CLI, a test, a legacy thread) using the async API through std::future:
// an io_context runs on a background thread; the calling thread waits on futures.
//
//   futures [redis://127.0.0.1:6379]     (or set REDIS_LOCK_URL)
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  const char* env = std::getenv("REDIS_LOCK_URL");
  auto config = redis_lock::ConnectionConfig::from_url(argc > 1 ? argv[1]
                                                       : env    ? env
                                                                : "redis://127.0.0.1:6379");
  if (!config) return 2;
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  int status = 0;
  {
    redis_lock::LockManager locks(io.get_executor(), *config);
    try {
      // use_future turns the error into an exception thrown by get().
      redis_lock::LockGuard g =
          locks.async_acquire("nightly-report", {.ttl = 30s}, asio::use_future).get();
      if (!g) {
        std::puts("another node is building the report; nothing to do");
      } else {
        std::printf("building the report under fencing token %llu\n",
                    static_cast<unsigned long long>(g.fencing_token()));
        const bool extended = g.async_extend(60s, asio::use_future).get();  // it takes longer
        const bool released = g.async_release(asio::use_future).get();
        std::printf("extended: %s, released: %s\n", extended ? "yes" : "no",
                    released ? "yes" : "no");
        status = extended && released ? 0 : 1;
      }
    } catch (const boost::system::system_error& e) {
      std::printf("error: %s\n", e.what());
      status = 1;
    }
  }
  work.reset();
  runner.join();
  return status;
}

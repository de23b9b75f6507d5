// SPDX-License-Identifier: MIT
// The README's coroutine example, as a program: take the lock for one order or answer 409.
//
//   coroutine [redis://127.0.0.1:6379]     (or set REDIS_LOCK_URL)
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>

namespace asio = boost::asio;
using namespace std::chrono_literals;

asio::awaitable<int> handle_checkout(redis_lock::LockManager& locks, std::string order_id) {
  redis_lock::LockGuard g =
      co_await locks.async_acquire("order:" + order_id, {.ttl = 5s}, asio::use_awaitable);
  if (!g) co_return 409;  // someone else is processing this order: not an error
  std::printf("charging order %s with fencing token %llu\n", order_id.c_str(),
              static_cast<unsigned long long>(g.fencing_token()));
  co_await g.async_release(asio::use_awaitable);  // or let the destructor post it
  co_return 200;
}

int main(int argc, char** argv) {
  const char* env = std::getenv("REDIS_LOCK_URL");
  auto config = redis_lock::ConnectionConfig::from_url(argc > 1 ? argv[1]
                                                       : env    ? env
                                                                : "redis://127.0.0.1:6379");
  if (!config) return 2;
  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), *config);
  int status = 0;
  asio::co_spawn(io, handle_checkout(locks, "42"), [&](std::exception_ptr e, int http) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const boost::system::system_error& err) {
        std::printf("error: %s\n", err.what());
      }
      status = 1;
      return;
    }
    std::printf("HTTP %d\n", http);
  });
  io.run();
  return status;
}

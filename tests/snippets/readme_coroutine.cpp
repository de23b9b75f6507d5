// SPDX-License-Identifier: MIT
// README.md's coroutine example, a whole program: built as is and run by readme.cpp's tests
// (with the URL of a live server, of none, and a malformed one).
//[readme_coroutine
#include <redis_lock/redis_lock.hpp>
#include <boost/asio.hpp>
#include <cstdio>
#include <string>
namespace asio = boost::asio;
using namespace std::chrono_literals;

// The work the lock protects; here it only says what it would do.
void charge(const std::string& order_id, std::uint64_t fencing_token) {
  std::printf("charging order %s, fencing token %llu\n", order_id.c_str(),
              static_cast<unsigned long long>(fencing_token));
}

asio::awaitable<int> checkout(redis_lock::LockManager& locks, std::string order_id) {
  redis_lock::LockGuard g = co_await locks.async_acquire("order:" + order_id, {.ttl = 5s},
                                                         asio::use_awaitable);
  if (!g) co_return 409;                          // held elsewhere: not an error
  charge(order_id, g.fencing_token());            // strictly increasing per resource
  co_await g.async_release(asio::use_awaitable);  // or let the destructor post it
  co_return 200;
}

int main(int argc, char** argv) {
  std::string why;
  const auto config = redis_lock::ConnectionConfig::from_url(
      argc > 1 ? argv[1] : "redis://127.0.0.1:6379", why);
  if (!config) {                                  // a malformed URL: check before using it
    std::fprintf(stderr, "bad URL: %s\n", why.c_str());
    return 2;
  }
  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), *config);
  asio::co_spawn(io, checkout(locks, "42"), [](std::exception_ptr e, int status) {
    if (e) std::rethrow_exception(e);             // e.g. Redis unreachable: loud, not silent
    std::printf("checkout: %d\n", status);
  });
  io.run();
}
//]

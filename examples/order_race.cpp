// SPDX-License-Identifier: MIT
// Two workers (each with its own LockManager, as two processes would have) race for the same
// order. One wins and charges it; the other is told the order is held elsewhere — not an
// error, the 409 case — and retries. Each charges twice; every fencing token is higher than
// the one before.
//
//   order_race [redis://127.0.0.1:6379]     (or set REDIS_LOCK_URL)
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

struct Ledger {
  std::uint64_t last_fence = 0;  // what a fenced store would remember
  int charges = 0;
  int conflicts = 0;
};

asio::awaitable<void> worker(const char* name, redis_lock::LockManager& locks,
                             const std::string& order, Ledger& ledger, int charges) {
  auto ex = co_await asio::this_coro::executor;
  while (charges > 0) {
    redis_lock::LockGuard g = co_await locks.async_acquire(order, {.ttl = 5s}, asio::use_awaitable);
    if (!g) {
      ++ledger.conflicts;
      std::printf("  [%s] %s is held elsewhere -> would answer 409 Conflict\n", name,
                  order.c_str());
      asio::steady_timer backoff(ex, 10ms);
      co_await backoff.async_wait(asio::use_awaitable);
      continue;
    }
    const bool fresh = g.fencing_token() > ledger.last_fence;
    std::printf("  [%s] took %s, fencing token %llu%s -> charging\n", name, order.c_str(),
                static_cast<unsigned long long>(g.fencing_token()),
                fresh ? " (higher than any before)" : " (STALE!)");
    ledger.last_fence = g.fencing_token();
    ++ledger.charges;
    --charges;
    asio::steady_timer work(ex, 20ms);  // the "charge"
    co_await work.async_wait(asio::use_awaitable);
    // Printed before releasing: the other worker cannot take the lock until this is sent.
    std::printf("  [%s] charged; releasing %s\n", name, order.c_str());
    const bool released = co_await g.async_release(asio::use_awaitable);
    if (!released) {
      std::printf("  [%s] the lease had expired before the release: ttl too short!\n", name);
    }
    asio::steady_timer pause(ex, 30ms);  // give the other worker its turn
    co_await pause.async_wait(asio::use_awaitable);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("REDIS_LOCK_URL");
  const std::string url = argc > 1 ? argv[1] : env ? env : "redis://127.0.0.1:6379";
  auto config = redis_lock::ConnectionConfig::from_url(url);
  if (!config) {
    std::fprintf(stderr, "bad URL %s: %s\n", url.c_str(), config.error().message().c_str());
    return 2;
  }
  asio::io_context io;
  redis_lock::LockManager worker_a(io.get_executor(), *config);
  redis_lock::LockManager worker_b(io.get_executor(), *config);
  const std::string order = "order:42";
  Ledger ledger;

  std::printf("Two workers race for %s on %s\n", order.c_str(), url.c_str());
  bool failed = false;
  auto on_done = [&](std::exception_ptr e) {
    if (!e) return;
    failed = true;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "error: %s\n", ex.what());
    }
  };
  asio::co_spawn(io, worker("worker-A", worker_a, order, ledger, 2), on_done);
  asio::co_spawn(io, worker("worker-B", worker_b, order, ledger, 2), on_done);
  io.run();
  if (failed) return 1;
  std::printf(
      "Summary: %d charges, each under its own lock; %d times a worker was told the "
      "order was busy; last fencing token %llu.\n",
      ledger.charges, ledger.conflicts, static_cast<unsigned long long>(ledger.last_fence));
  return ledger.charges == 4 && ledger.conflicts > 0 ? 0 : 1;
}

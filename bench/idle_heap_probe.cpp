// SPDX-License-Identifier: MIT
// What one manager keeps on the heap while idle, across server restarts. It starts its own
// server (the test harness's), runs 40 coroutines of acquire/release on one manager for a
// while, lets the manager go idle, and reads the heap in use (glibc's mallinfo2, bytes the
// allocator has handed out and not had back). Then it kills the server with SIGKILL (the
// coroutines meet the outage), restarts it on the same port, and does the same again. A
// manager that keeps something per restart grows in every row; one that only warms up (a
// buffer that grew to its working size, the scripts' hashes learnt again) stops growing.
//
// Under `valgrind --tool=massif`, each row also writes a detailed snapshot (the call paths
// of what is held) to massif.row<N>, to compare rows with ms_print.
//
//   idle_heap_probe [--restarts N] [--busy-ms MS]
#include "redis_server.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <malloc.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define REDIS_LOCK_HAVE_VALGRIND 1
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

std::size_t heap_in_use() {
  malloc_trim(0);
  return mallinfo2().uordblks;
}

void snapshot_if_profiled(int row) {
#ifdef REDIS_LOCK_HAVE_VALGRIND
  if (RUNNING_ON_VALGRIND) {
    const auto command = "detailed_snapshot massif.row" + std::to_string(row);
    VALGRIND_MONITOR_COMMAND(command.c_str());
  }
#else
  (void)row;
#endif
}

struct Phase {
  std::size_t acquired = 0, errors = 0;
};

asio::awaitable<void> worker(redis_lock::LockManager& locks, int id, const bool& stop, Phase& phase,
                             int& running) {
  asio::steady_timer pause(co_await asio::this_coro::executor);
  const auto resource = "heap-probe:" + std::to_string(id % 10);
  while (!stop) {
    auto [ec, guard] = co_await locks.async_acquire(resource, {.ttl = 2s, .wait = 500ms},
                                                    asio::as_tuple(asio::use_awaitable));
    if (ec) {
      ++phase.errors;
      pause.expires_after(20ms);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    if (!guard) continue;
    ++phase.acquired;
    co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
  }
  --running;
}

Phase busy_then_idle(asio::io_context& io, redis_lock::LockManager& locks,
                     std::chrono::milliseconds busy) {
  Phase phase;
  bool stop = false;
  int running = 40;
  for (int i = 0; i < 40; ++i) {
    asio::co_spawn(io, worker(locks, i, stop, phase, running), asio::detached);
  }
  io.restart();
  io.run_for(busy);
  stop = true;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (running > 0 && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_one_for(100ms);
  }
  io.restart();
  io.run_for(1500ms);  // idle: whatever settles after the last release
  return phase;
}

}  // namespace

int main(int argc, char** argv) {
  int restarts = 8;
  auto busy = 3000ms;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--restarts") == 0 && i + 1 < argc) {
      restarts = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--busy-ms") == 0 && i + 1 < argc) {
      busy = std::chrono::milliseconds(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: idle_heap_probe [--restarts N] [--busy-ms MS]\n");
      return 2;
    }
  }
  redis_lock::test::RedisServer server;
  asio::io_context io;
  const auto before = heap_in_use();
  redis_lock::LockManager locks(io.get_executor(), server.config());
  std::printf("%-10s %12s %12s %10s %8s\n", "phase", "idle heap B", "vs previous", "acquired",
              "errors");
  std::size_t previous = before;
  for (int round = 0; round <= restarts; ++round) {
    if (round > 0) {
      server.kill(SIGKILL);
      // The outage: the workers meet it for a second, then the server comes back.
      Phase outage;
      {
        bool stop = false;
        int running = 40;
        for (int i = 0; i < 40; ++i) {
          asio::co_spawn(io, worker(locks, i, stop, outage, running), asio::detached);
        }
        io.restart();
        io.run_for(1s);
        server.restart();
        io.restart();
        io.run_for(busy);
        stop = true;
        const auto until = std::chrono::steady_clock::now() + 30s;
        while (running > 0 && std::chrono::steady_clock::now() < until) {
          io.restart();
          io.run_one_for(100ms);
        }
      }
    }
    const auto phase = busy_then_idle(io, locks, busy);
    const auto now = heap_in_use();
    snapshot_if_profiled(round);
    std::printf("%-10s %12zu %+12lld %10zu %8zu\n",
                round == 0 ? "start" : ("restart " + std::to_string(round)).c_str(), now - before,
                static_cast<long long>(now) - static_cast<long long>(previous), phase.acquired,
                phase.errors);
    std::fflush(stdout);
    previous = now;
  }
  return 0;
}

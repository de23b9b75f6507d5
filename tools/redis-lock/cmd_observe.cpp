// SPDX-License-Identifier: MIT
// redis-lock observe: an election's leader, then each change.
#include "commands.hpp"
#include "diagnose.hpp"

#include <csignal>
#include <cstring>

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace redis_lock::cli {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// Prints the election's leader, then each change, until a signal (0), a closed stdout
/// (128+SIGPIPE, as a program killed by it), or (before anything was printed) an error.
asio::awaitable<int> observe(const Options& o, redis_lock::ConnectionConfig config) {
  auto ex = co_await asio::this_coro::executor;
  redis_lock::LockManager locks(ex, config, manager_options(o));
  redis_lock::Election election(locks, o.name);
  asio::signal_set signals(ex, SIGINT, SIGTERM, SIGHUP);
  asio::cancellation_signal cancel;
  asio::steady_timer pause(ex);
  bool stopping = false;
  signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (o.verbose) say("SIG%s: stopping", sigabbrev_np(sig));
    stopping = true;
    cancel.emit(asio::cancellation_type::terminal);
    pause.cancel();
  });
  struct CancelAtEnd {
    asio::signal_set& signals;
    ~CancelAtEnd() { signals.cancel(); }
  } cancel_at_end{signals};

  std::uint64_t after = 0;
  std::optional<std::string> printed;  // the last line printed
  std::uint64_t last_term = 0;
  bool failing = false;
  while (!stopping) {
    auto [ec, leader] = co_await election.async_observe(
        after, asio::bind_cancellation_slot(cancel.slot(), asio::as_tuple(asio::use_awaitable)));
    if (stopping) break;
    if (ec) {
      if (!printed) co_return failed(o, config, locks, ec).exit_code;
      if (!failing) {
        say("%s: %s; trying again every second", o.resource.c_str(),
            describe_failure(config, ec, locks.last_server_error()).c_str());
      }
      failing = true;
      pause.expires_after(1s);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    if (failing && o.verbose) say("%s: reachable again", o.resource.c_str());
    failing = false;
    if (leader) last_term = leader->term;
    after = leader ? leader->term : std::max<std::uint64_t>(after, 1);
    auto line = describe_leader(o, leader, last_term);
    if (line == printed) continue;  // the same state, read again after an outage
    if (!print(line)) co_return 128 + SIGPIPE;
    printed = std::move(line);
  }
  co_return 0;
}

}  // namespace redis_lock::cli

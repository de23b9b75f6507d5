// SPDX-License-Identifier: MIT
// redis-lock force-release: an operator takes a resource away from its holder.
#include "commands.hpp"
#include "diagnose.hpp"

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

asio::awaitable<int> force_release(const Options& o, redis_lock::ConnectionConfig config) {
  redis_lock::LockManager locks(co_await asio::this_coro::executor, config, manager_options(o));
  if (o.verbose) {
    say("force-releasing %s on %s", o.resource.c_str(), describe_target(config).c_str());
  }
  const auto [ec, released] =
      co_await locks.async_force_release(o.resource, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return failed(o, config, locks, ec).exit_code;
  if (o.json) {
    print("{\"resource\":" + json_string(o.resource) +
          ",\"released\":" + (released ? "true" : "false") + "}\n");
  } else {
    print(o.resource + (released ? ": released\n" : ": was not held\n"));
  }
  co_return released ? 0 : exit_not_held;
}

}  // namespace redis_lock::cli

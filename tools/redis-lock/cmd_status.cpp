// SPDX-License-Identifier: MIT
// redis-lock status: who holds a resource; and the manager options (the label, the server
// notices) every subcommand uses.
#include "commands.hpp"
#include "diagnose.hpp"

#include <unistd.h>
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

/// HOSTNAME:PID, the label stored with each lease this redis-lock takes (what `status`
/// shows): printable ASCII only, at most the library's 128 characters.
std::string holder_label() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  const std::string pid = ":" + std::to_string(::getpid());
  std::string label;
  for (const char* c = host; *c != '\0' && label.size() + pid.size() < 128; ++c) {
    label += (*c >= 0x20 && *c < 0x7f) ? *c : '?';
  }
  return label + pid;
}

namespace {

/// Says each notice of the lock server on stderr (the library says each once per manager).
class NoticeWarnings final : public redis_lock::Observer {
 public:
  void on_server_notice(const redis_lock::ServerNotice& n) noexcept override {
    try {
      say("warning: %s: %s", printable(n.address).c_str(), in_cli_words(n.text).c_str());
    } catch (const std::exception&) {
      // No memory for the words: nothing said.
    }
  }
};

}  // namespace

redis_lock::ManagerOptions manager_options(const Options& o) {
  redis_lock::ManagerOptions options;
  options.holder_label = holder_label();
  options.accept_evicting_server = o.accept_evicting_server;
  options.observer = std::make_shared<NoticeWarnings>();
  return options;
}

asio::awaitable<int> status(const Options& o, redis_lock::ConnectionConfig config) {
  redis_lock::LockManager locks(co_await asio::this_coro::executor, config, manager_options(o));
  const auto [ec, info] =
      co_await locks.async_inspect(o.resource, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return failed(o, config, locks, ec).exit_code;
  print(describe_status(o, info));
  co_return 0;
}

}  // namespace redis_lock::cli

// SPDX-License-Identifier: MIT
#include "supervision.hpp"

#include <unistd.h>

extern char** environ;

namespace redis_lock::cli {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool sigpipe_was_ignored = false;

/// The signals we catch: the forwarded ones we did not inherit ignored (under nohup, SIGHUP
/// stays ignored, for the command too), and SIGCHLD.
std::vector<int> signals_to_catch() {
  std::vector<int> caught;
  for (int sig : forwarded_signals) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    caught.push_back(sig);
  }
  caught.push_back(SIGCHLD);
  return caught;
}

/// The command's environment: ours without the connection's secrets, plus the lock.
std::vector<std::string> command_environment(const Options& o, std::uint64_t fence) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool drop = false;
    for (std::string_view name : {"REDIS_LOCK_URL=", "REDIS_LOCK_PASSWORD=", "REDIS_LOCK_RESOURCE=",
                                  "REDIS_LOCK_FENCING_TOKEN="}) {
      drop = drop || entry.starts_with(name);
    }
    if (!drop) env.emplace_back(entry);
  }
  env.push_back("REDIS_LOCK_RESOURCE=" + o.resource);
  env.push_back("REDIS_LOCK_FENCING_TOKEN=" + std::to_string(fence));
  return env;
}

/// This program's file, for the watcher (so that ps names it redis-lock).
std::string own_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "/proc/self/exe";
}

const char* outcome_of(Stop s) {
  switch (s) {
    case Stop::lost:
      return "lost";
    case Stop::unconfirmed:
      return "renewal_unconfirmed";
    case Stop::lease_ending:
      return "lease_ending";
    case Stop::max_hold:
      return "max_hold";
    case Stop::none:
      break;
  }
  return "completed";
}

/// Releases `guard`, waiting at most release_deadline: an unresponsive server must not hold
/// up the exit. The state is shared with the handler, which may run after we gave up.
asio::awaitable<Released> release_bounded(redis_lock::LockGuard& guard) {
  struct State {
    explicit State(asio::any_io_executor ex) : timer(ex) { timer.expires_after(release_deadline); }
    asio::steady_timer timer;
    Released result;
  };
  auto state = std::make_shared<State>(co_await asio::this_coro::executor);
  guard.async_release([state](boost::system::error_code ec, bool released) {
    state->result = {true, released, ec};
    state->timer.cancel();
  });
  co_await state->timer.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return state->result;
}

/// Releases `guard` (bounded), records the outcome in `report`, and says on stderr if the
/// release failed or got no reply.
asio::awaitable<Released> release_and_report(redis_lock::LockGuard& guard, const Options& o,
                                             Report& report) {
  const auto release = co_await release_bounded(guard);
  report.released = release.replied && !release.ec && release.released;
  if (!release.replied || release.ec) {
    const std::string why = release.replied ? release.ec.message() : "no reply within 2s";
    say("could not release %s (%s); its lease ends by itself within %llds", o.resource.c_str(),
        why.c_str(), static_cast<long long>((o.ttl.count() + 999) / 1000));
  }
  co_return release;
}

}  // namespace redis_lock::cli

// SPDX-License-Identifier: MIT
// redis-lock: flock(1) for a fleet. Runs a command while holding a Redis lock, renewing it;
// if the lock is lost, the command is terminated.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <string_view>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace asio = boost::asio;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

// Exit codes (also in --help and the README).
constexpr int exit_not_acquired = 1;  // --nonblock, or --wait ran out (as flock -n / -w)
constexpr int exit_usage = 2;
constexpr int exit_redis_error = 3;   // could not reach Redis, or it refused (AUTH, ACL, ...)
constexpr int exit_lock_lost = 4;     // the lease was lost; the command was terminated
constexpr int exit_cannot_run = 126;  // the command could not be started
constexpr int exit_not_found = 127;   // the command was not found

constexpr const char* usage_text = R"(usage: redis-lock [options] RESOURCE -- COMMAND [ARGS...]

Runs COMMAND while holding the lock RESOURCE on Redis, renewing it as long as COMMAND runs.
COMMAND gets REDIS_LOCK_RESOURCE and REDIS_LOCK_FENCING_TOKEN in its environment.

options:
  --url URL          redis://[user[:password]@]host[:port][/db] or unix:///path
                     (default: $REDIS_LOCK_URL, else redis://127.0.0.1:6379)
  --ttl DURATION     lease length, renewed every ttl/3 (default 30s)
  --wait DURATION    wait at most this long for the lock (default: wait indefinitely)
  --nonblock, -n     do not wait: exit 1 at once if the lock is held elsewhere
  --no-renew         do not renew: the lease lasts --ttl from the acquire. COMMAND is
                     not told when it runs out: it keeps running without the lock (not
                     terminated; the exit status is its own), so choose --ttl above its
                     longest run
  --kill-after DUR   after the lock is lost, SIGTERM the command, then SIGKILL it after
                     this long (default 5s)
  -h, --help         this text
DURATION: a number with ms, s, m or h (a bare number is seconds).

SIGINT and SIGTERM are passed on to COMMAND (while waiting for the lock, they end the wait
with status 128+N). The lock is released when COMMAND exits.

exit status:
  COMMAND's status when it ran under the lock (128+N if killed by signal N)
  1    not acquired: held elsewhere (--nonblock) or --wait ran out
  2    usage error
  3    Redis could not be reached, or refused (authentication, permissions, ...)
  4    the lock was lost while COMMAND ran; COMMAND was terminated
  126  COMMAND could not be started;  127  COMMAND was not found
)";

std::optional<milliseconds> parse_duration(std::string_view text) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || value < 0) return std::nullopt;
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  if (unit.empty() || unit == "s") return milliseconds(value * 1000);
  if (unit == "ms") return milliseconds(value);
  if (unit == "m") return milliseconds(value * 60'000);
  if (unit == "h") return milliseconds(value * 3'600'000);
  return std::nullopt;
}

struct Options {
  std::string url;
  milliseconds ttl{30'000};
  std::optional<milliseconds> wait;  // none: indefinitely
  bool nonblock = false;
  bool renew = true;
  milliseconds kill_after{5000};
  std::string resource;
  std::vector<std::string> command;
};

std::optional<Options> parse_args(int argc, char** argv) {
  Options o;
  const char* env = std::getenv("REDIS_LOCK_URL");
  o.url = env != nullptr && *env != '\0' ? env : "redis://127.0.0.1:6379";
  int i = 1;
  auto value = [&](const char* name) -> std::optional<std::string> {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "redis-lock: %s needs a value\n", name);
      return std::nullopt;
    }
    return std::string(argv[++i]);
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else if (a == "--url") {
      auto v = value("--url");
      if (!v) return std::nullopt;
      o.url = *v;
    } else if (a == "--ttl" || a == "--wait" || a == "--kill-after") {
      auto v = value(a.c_str());
      if (!v) return std::nullopt;
      auto d = parse_duration(*v);
      if (!d || (a == "--ttl" && d->count() == 0)) {
        std::fprintf(stderr, "redis-lock: bad duration for %s: %s\n", a.c_str(), v->c_str());
        return std::nullopt;
      }
      if (a == "--ttl") o.ttl = *d;
      else if (a == "--wait") o.wait = *d;
      else o.kill_after = *d;
    } else if (a == "--nonblock" || a == "-n") {
      o.nonblock = true;
    } else if (a == "--no-renew") {
      o.renew = false;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "redis-lock: unknown option %s\n", a.c_str());
      return std::nullopt;
    } else if (o.resource.empty()) {
      o.resource = a;
    } else {
      std::fprintf(stderr, "redis-lock: unexpected argument %s (missing --?)\n", a.c_str());
      return std::nullopt;
    }
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.resource.empty() || o.command.empty()) {
    std::fputs("redis-lock: a RESOURCE and a COMMAND after -- are required\n", stderr);
    return std::nullopt;
  }
  if (o.nonblock && o.wait) {
    std::fputs("redis-lock: --nonblock and --wait exclude each other\n", stderr);
    return std::nullopt;
  }
  return o;
}

/// Starts the command with the lock's details in its environment; errno-style result.
int spawn_command(const Options& o, std::uint64_t fence, pid_t& pid) {
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("REDIS_LOCK_RESOURCE=", 0) == 0 ||
        entry.rfind("REDIS_LOCK_FENCING_TOKEN=", 0) == 0) {
      continue;
    }
    env_storage.emplace_back(entry);
  }
  env_storage.push_back("REDIS_LOCK_RESOURCE=" + o.resource);
  env_storage.push_back("REDIS_LOCK_FENCING_TOKEN=" + std::to_string(fence));
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
}

asio::awaitable<int> run(const Options& o, redis_lock::ConnectionConfig config) {
  auto ex = co_await asio::this_coro::executor;
  redis_lock::LockManager locks(ex, config);
  redis_lock::LockOptions lock_options{.ttl = o.ttl, .auto_renew = o.renew};
  lock_options.wait = o.nonblock ? 0ms : o.wait.value_or(std::chrono::hours(24 * 365 * 10));

  // Signals are ours from the start: SIGINT/SIGTERM while we wait for the lock cancel the
  // wait (and leave the queue); once the command runs they are passed on. (Installed only
  // after acquiring, a SIGTERM in between killed redis-lock itself: seen under ASan.)
  asio::signal_set signals(ex, SIGINT, SIGTERM, SIGCHLD);
  asio::cancellation_signal cancel_acquire;
  pid_t child = -1;
  int early_signal = 0;
  std::function<void()> watch_early = [&] {
    signals.async_wait([&](boost::system::error_code sig_ec, int sig) {
      if (sig_ec) return;
      if (sig == SIGCHLD) return watch_early();  // not our command's: nothing runs yet
      if (child > 0) {
        ::kill(child, sig);  // arrived just as the command started
      } else {
        early_signal = sig;
        cancel_acquire.emit(asio::cancellation_type::terminal);
      }
    });
  };
  watch_early();

  // One attempt first: a server that cannot be reached at the start is a mistake to report
  // at once (a wrong URL must not wait forever). Once it has answered, a waiting acquire
  // rides out outages within its wait, as the library does.
  const auto acquire = [&](const redis_lock::LockOptions& options) {
    return locks.async_acquire(
        o.resource, options,
        asio::bind_cancellation_slot(cancel_acquire.slot(), asio::as_tuple(asio::use_awaitable)));
  };
  redis_lock::LockOptions first_try = lock_options;
  first_try.wait = 0ms;
  auto [ec, guard] = co_await acquire(first_try);
  if (!ec && !guard && early_signal == 0 && lock_options.wait.count() > 0) {
    std::tie(ec, guard) = co_await acquire(lock_options);
  }
  if (early_signal != 0) co_return 128 + early_signal;  // the guard, if any, releases
  signals.cancel();  // the main loop below waits on the signals from now on
  if (ec) {
    std::fprintf(stderr, "redis-lock: %s: %s\n", o.resource.c_str(), ec.message().c_str());
    co_return exit_redis_error;
  }
  if (!guard) {
    std::fprintf(stderr, "redis-lock: %s is held elsewhere\n", o.resource.c_str());
    co_return exit_not_acquired;
  }

  if (const int err = spawn_command(o, guard.fencing_token(), child); err != 0) {
    std::fprintf(stderr, "redis-lock: %s: %s\n", o.command[0].c_str(), std::strerror(err));
    co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
    co_return err == ENOENT ? exit_not_found : exit_cannot_run;
  }

  bool lost = false;
  asio::steady_timer kill_timer(ex);
  guard.async_wait_lost([&](boost::system::error_code lost_ec) {
    if (lost_ec != redis_lock::error::lock_lost) return;
    lost = true;
    std::fprintf(stderr, "redis-lock: lost the lock on %s; terminating the command\n",
                 o.resource.c_str());
    ::kill(child, SIGTERM);
    kill_timer.expires_after(o.kill_after);
    kill_timer.async_wait([&](boost::system::error_code timer_ec) {
      if (!timer_ec) ::kill(child, SIGKILL);
    });
  });

  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    auto [sig_ec, signal] = co_await signals.async_wait(asio::as_tuple(asio::use_awaitable));
    if (sig_ec == asio::error::operation_aborted) continue;  // the early watcher's cancel
    if (sig_ec) break;
    if (signal == SIGINT || signal == SIGTERM) ::kill(child, signal);  // pass it on
  }
  kill_timer.cancel();
  signals.cancel();
  co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
  if (lost) co_return exit_lock_lost;
  if (WIFEXITED(status)) co_return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) co_return 128 + WTERMSIG(status);
  co_return exit_cannot_run;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse_args(argc, argv);
  if (!options) {
    std::fputs("try 'redis-lock --help'\n", stderr);
    return exit_usage;
  }
  auto config = redis_lock::ConnectionConfig::from_url(options->url);
  if (!config) {
    // Not echoed: it may carry a password.
    std::fputs("redis-lock: the URL is not a valid redis://, rediss:// or unix:// URL\n", stderr);
    return exit_usage;
  }
  asio::io_context io(1);
  int result = exit_redis_error;
  asio::co_spawn(io, run(*options, *config), [&](std::exception_ptr e, int code) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "redis-lock: %s\n", ex.what());
      }
      result = exit_redis_error;
      return;
    }
    result = code;
  });
  io.run();
  return result;
}

// SPDX-License-Identifier: MIT
// redis-lock: flock(1) for a fleet. Runs a command while holding a Redis lock, renewing
// it; stops the command's whole process group before the lease can lapse. The subcommands
// are in cmd_*.cpp, the supervision in supervision.cpp, the output in output.cpp.
#include "commands.hpp"
#include "diagnose.hpp"
#include "options.hpp"
#include "process.hpp"
#include "supervision.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <signal.h>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace redis_lock::cli;

namespace {

/// Runs `task` on `io` to its end (an exception is said, and `if_thrown` returned); then
/// what the library posted on the way out (the give-back of a lease granted to a wait a
/// signal cancelled, a queue place left) goes out, bounded: a release that got no reply is
/// given up on, and nothing holds up the exit.
template <class T>
T run_to_end(asio::io_context& io, asio::awaitable<T> task, T if_thrown) {
  T result = std::move(if_thrown);
  bool done = false;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T r) {
    done = true;
    if (!e) {
      result = std::move(r);
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      say("%s", ex.what());
    }
  });
  while (!done && io.run_one() > 0) {
  }
  io.restart();
  io.run_for(1s);
  return result;
}

/// Overwrites the password of a --url argument in our own argv, so that `ps` stops
/// showing it (it was visible from exec until here: the warning says so).
void scrub_password(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return;
    char* url = argv[i];
    if (std::strncmp(url, "--url=", 6) == 0)
      url += 6;
    else if (std::strcmp(url, "--url") == 0 && i + 1 < argc)
      url = argv[++i];
    else
      continue;
    char* scheme_end = std::strstr(url, "://");
    if (scheme_end == nullptr) continue;
    // Query parameters that carry a password (sentinel_password=...).
    if (char* query = std::strchr(url, '?')) {
      for (char* p = std::strstr(query, "password="); p != nullptr;
           p = std::strstr(p, "password=")) {
        p += 9;
        while (*p != '\0' && *p != '&') *p++ = '*';
      }
    }
    char* userinfo = scheme_end + 3;
    char* at = std::strchr(userinfo, '@');
    char* slash = std::strchr(userinfo, '/');
    if (at == nullptr || (slash != nullptr && slash < at)) continue;
    char* colon =
        static_cast<char*>(std::memchr(userinfo, ':', static_cast<std::size_t>(at - userinfo)));
    if (colon == nullptr) continue;
    std::fill(colon + 1, at, '*');
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], guardian_flag) == 0) return guardian_main(argc, argv);
  const auto parsed = parse_command_line(
      argc, argv, [](const char* name) -> const char* { return std::getenv(name); });
  if (parsed.action == Parsed::Action::print_and_exit) {
    std::fputs(parsed.text.c_str(), stdout);
    return 0;
  }
  if (parsed.action == Parsed::Action::usage_error) {
    std::fprintf(stderr, "%s\ntry 'redis-lock --help'\n", parsed.text.c_str());
    return exit_usage;
  }
  const Options& o = parsed.options;
  std::string why;
  auto config = redis_lock::ConnectionConfig::from_url(o.url, why);
  if (!config) {
    // The URL itself is not echoed: it may carry a password (`why` never does).
    std::fprintf(stderr, "redis-lock: bad URL%s: %s\n",
                 o.url_from_flag ? "" : " in $REDIS_LOCK_URL", why.c_str());
    return exit_usage;
  }
  if (o.url_from_flag && (!config->password.empty() || !config->sentinel_password.empty())) {
    scrub_password(argc, argv);
    std::fputs(
        "redis-lock: warning: a password in --url is visible to other users (ps) until "
        "redis-lock has started; use --password-file or $REDIS_LOCK_PASSWORD\n",
        stderr);
  }
  if (o.password) config->password = *o.password;
  for (const auto& w : o.warnings) std::fprintf(stderr, "redis-lock: warning: %s\n", w.c_str());
  if (config->tls && !config->tls_verify) {
    std::fputs(
        "redis-lock: warning: tls_verify=false: the server's certificate is not checked, so "
        "anyone between here and the server can read and change the traffic, the password "
        "included (for tests only)\n",
        stderr);
  }
  // A closed stderr must not kill us while we hold the lock (the command gets SIGPIPE back).
  struct sigaction pipe_action {};
  ::sigaction(SIGPIPE, nullptr, &pipe_action);
  sigpipe_was_ignored = pipe_action.sa_handler == SIG_IGN;
  ::signal(SIGPIPE, SIG_IGN);

  asio::io_context io(1);
  if (o.mode == Mode::status || o.mode == Mode::force_release || o.mode == Mode::observe) {
    auto task = o.mode == Mode::status          ? status(o, *config)
                : o.mode == Mode::force_release ? force_release(o, *config)
                                                : observe(o, *config);
    return run_to_end(io, std::move(task), exit_redis_error);
  }
  const Report report = run_to_end(io, run(o, *config), Report{});
  if (o.json) print_json(o, report);
  return report.exit_code;
}

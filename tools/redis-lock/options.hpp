// SPDX-License-Identifier: MIT
// redis-lock's command line: what it accepts and what it means. No I/O beyond reading
// --password-file; unit-tested in tests/unit/cli_options_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::cli {

using std::chrono::milliseconds;

// Exit codes (also in --help and the README).
inline constexpr int exit_not_acquired = 1;  // --nonblock, or --wait ran out (-E changes it)
inline constexpr int exit_not_held = 1;      // force-release: nobody held it
inline constexpr int exit_usage = 2;
inline constexpr int exit_redis_error = 3;   // could not reach Redis, or it refused
inline constexpr int exit_lock_lost = 4;     // lost, unconfirmed or (--no-renew) ending lease
inline constexpr int exit_max_hold = 124;    // --max-hold ran out (as timeout(1))
inline constexpr int exit_cannot_run = 126;  // the command could not be started
inline constexpr int exit_not_found = 127;   // the command was not found

/// The shortest --ttl: below it the renewal, the SIGTERM grace and the SIGKILL margin do
/// not fit in a lease.
inline constexpr milliseconds min_ttl{1000};
/// --kill-after when not given.
inline constexpr milliseconds default_kill_after{5000};
/// The longest duration anywhere (the library's ttl limit).
inline constexpr milliseconds max_duration{315'360'000'000};  // 10 years

/// What redis-lock is asked to do: the first positional argument names a subcommand, else
/// it is RESOURCE and the mode is `run`.
enum class Mode {
  run,            ///< RESOURCE -- COMMAND: run COMMAND while holding the lock
  elect,          ///< elect NAME -- COMMAND: run COMMAND while leading the election NAME
  status,         ///< status RESOURCE: who holds it, for how long
  force_release,  ///< force-release RESOURCE: take it away from whoever holds it
  observe,        ///< observe NAME: one line per change of the election's leader
};

/// The subcommand's name as typed ("" for run).
const char* mode_name(Mode mode);

/// The longest --value of `elect` (the library's limit for an election's value).
inline constexpr std::size_t max_value_size = 1024;

struct Options {
  Mode mode = Mode::run;
  std::string url;  ///< --url, else $REDIS_LOCK_URL, else the local default
  bool url_from_flag = false;
  std::optional<std::string> password;  ///< --password-file, else $REDIS_LOCK_PASSWORD
  std::vector<std::string> warnings;    ///< said on stderr before anything else
  milliseconds ttl{30'000};
  std::optional<milliseconds> wait;  ///< none: indefinitely
  bool nonblock = false;
  bool renew = true;
  std::optional<milliseconds> kill_after;  ///< none: default_kill_after
  std::optional<milliseconds> max_hold;
  int conflict_exit_code = exit_not_acquired;
  bool print_token = false;
  bool verbose = false;
  bool json = false;
  /// --accept-evicting-server: ManagerOptions::accept_evicting_server (a lock server that
  /// evicts keys is used, and said on stderr)
  bool accept_evicting_server = false;
  std::uint32_t permits = 0;  ///< --permits N: a permit of the semaphore RESOURCE; 0: a mutex
  bool shared = false;        ///< --shared: a shared hold of the read-write lock RESOURCE
  /// The lock (run, status, force-release); for elect and observe, the election's lock
  /// "election:NAME" (what `status` shows of it).
  std::string resource;
  std::string name;                  ///< elect, observe: the election's NAME
  std::string value;                 ///< elect: --value, what the leader proclaims
  std::vector<std::string> command;  ///< argv; `-c STRING` is {"/bin/sh", "-c", STRING}
};

/// What the command line asks for.
struct Parsed {
  enum class Action { run, print_and_exit, usage_error } action = Action::run;
  Options options;
  std::string text;  ///< help or version text (stdout), or the error (stderr)
};

/// A duration: a decimal number (fractions allowed) with ms, s, m or h; a bare number is
/// seconds. Negative, not finite, or above max_duration: none.
std::optional<milliseconds> parse_duration(std::string_view text);

/// `getenv` is how the environment is read (injected for tests).
Parsed parse_command_line(int argc, const char* const* argv, const char* (*getenv)(const char*));

/// The help text.
std::string usage();

}  // namespace redis_lock::cli

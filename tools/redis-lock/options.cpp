// SPDX-License-Identifier: MIT
#include "options.hpp"

#include <boost/program_options.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/stat.h>

namespace po = boost::program_options;

namespace redis_lock::cli {

namespace {

constexpr std::string_view default_url = "redis://127.0.0.1:6379";

constexpr const char* usage_text = R"(usage: redis-lock [options] RESOURCE -- COMMAND [ARGS...]
       redis-lock [options] RESOURCE -c 'SHELL COMMAND'
       redis-lock [options] elect NAME [--value V] -- COMMAND [ARGS...]
       redis-lock [options] status RESOURCE [--json]
       redis-lock [options] force-release RESOURCE [--json]
       redis-lock [options] observe NAME [--json]

Runs COMMAND while holding the lock RESOURCE on Redis, renewing the lease as long as COMMAND
runs. RESOURCE is a mutex (one holder at a time), or with --permits a semaphore, with
--shared a read-write lock. COMMAND runs in its own process group and gets REDIS_LOCK_RESOURCE and
REDIS_LOCK_FENCING_TOKEN in its environment (never the URL or the password). The lock is
released when every process of that group has exited. Each lease is labelled with the
HOSTNAME:PID of the redis-lock holding it (status shows it).

subcommands (the first argument that is not an option; a RESOURCE named like one of them,
or starting with '-', is given with --resource=RESOURCE). Not on a redis+redlock:// URL
(exit 2):
  elect NAME             campaign in the election NAME, waiting fairly with the other
                         candidates, and run COMMAND only while leading: it gets the term
                         as REDIS_LOCK_FENCING_TOKEN, and is stopped as for a lost lock
                         (exit 4) when the leadership is lost. The options of a lock
                         apply, except --permits, --shared and --no-renew
  status RESOURCE        who holds RESOURCE (any kind; an election NAME is the lock
                         election:NAME), its fencing token, the time left, the waiters.
                         Exit 0 (held or not), or 3
  force-release RESOURCE end the hold of whoever holds RESOURCE now. The evicted holder
                         is not stopped: it learns of the loss at its next renewal (a
                         redis-lock then stops its command, exit 4) and may write until
                         then. The next holder's fencing token is larger, so a store that
                         checks tokens refuses the evicted one's writes only once the next
                         holder has written; with nobody waiting, none is minted now.
                         Exit 0 if it was released, 1 if nobody held it
  observe NAME           print the election's leader, then a line for each change of
                         leader, until SIGINT, SIGTERM or SIGHUP (exit 0); it rides out
                         lost connections. Exit 3 if Redis cannot be reached at the start,
                         141 (128+SIGPIPE) once its stdout is closed

options:
  --url URL              redis://[user@]host[:port][/db], rediss://..., unix:///path, or
                         redis+sentinel://, redis+cluster:// (default: $REDIS_LOCK_URL,
                         else redis://127.0.0.1:6379). A password in the URL is visible
                         to other users in ps: prefer one of the next two
  --password-file FILE   the password is the first line of FILE
                         (else $REDIS_LOCK_PASSWORD, else the URL's)
  --ttl DURATION         lease length, at least 1s; renewed every ttl/3 (default 30s)
  -w, --wait DURATION    wait at most this long for the lock (default: indefinitely)
  -n, --nonblock         do not wait: fail at once if the lock is held elsewhere
  --no-renew             do not renew: the lease lasts --ttl, and COMMAND is stopped
                         (as when the lock is lost) before it ends
  --kill-after DURATION  grace between SIGTERM and SIGKILL when COMMAND must stop
                         (default 5s; at most ttl/3, so that both come before the
                         lease can expire)
  --max-hold DURATION    time limit for COMMAND: SIGTERM, then SIGKILL after the grace
  --permits N            take one of N permits of the semaphore RESOURCE: at most N
                         commands hold one at a time (every caller must pass the same N)
  --shared               take a shared hold of the read-write lock RESOURCE: any number
                         of shared holders together, never beside an exclusive one (a
                         program's async_acquire_exclusive)
  --value V              elect: what the leader proclaims (an address, say; at most 1024
                         bytes), shown by observe
  --resource=RESOURCE    RESOURCE (or NAME) as an option: for a name that starts with '-'
                         or is a subcommand's
  -c, --command STRING   run STRING with /bin/sh -c (instead of COMMAND after --)
  -E, --conflict-exit-code N
                         exit status when the lock is not acquired (default 1)
  --print-token          print the fencing token on stdout before COMMAND starts
  -v, --verbose          say on stderr what happens (connect, wait, acquire, release)
  --json                 at exit, print one JSON status line on stderr; with status,
                         force-release and observe: JSON on stdout instead of text
  --accept-evicting-server
                         use a Redis that evicts keys (maxmemory with a maxmemory-policy
                         other than noeviction), which could drop a held lease; said on
                         stderr. Without it, such a server is refused (exit 3)
  -V, --version          print the version
  -h, --help             this text
DURATION: a number, fractions allowed, with ms, s, m or h (a bare number is seconds).

Signals: SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 are passed on to COMMAND's
process group, once; while waiting for the lock they end the wait with status 128+N. If
the lease is lost or a renewal is not confirmed in time, COMMAND's group gets SIGTERM early
enough that the grace ends before the lease can expire, and SIGKILL before it does. If
redis-lock itself dies (even by SIGKILL), a watcher process does the same to the group.

exit status:
  COMMAND's status when it ran under the lock (128+N if killed by signal N)
  1    not acquired: held elsewhere (--nonblock) or --wait ran out (see -E);
       force-release: nobody held RESOURCE
  2    usage error (nothing was sent to Redis)
  3    Redis could not be reached, or refused (authentication, permissions, ...), or
       it evicts keys (without --accept-evicting-server)
  4    COMMAND was stopped because the lease was lost, its renewal was not confirmed
       in time, or (--no-renew) it was about to end
  124  COMMAND was stopped by --max-hold
  126  COMMAND could not be started;  127  COMMAND was not found
  With --json the status line says which of these it was.
)";

Parsed fail(std::string message) {
  Parsed p;
  p.action = Parsed::Action::usage_error;
  p.text = "redis-lock: " + std::move(message);
  return p;
}

std::optional<int> parse_exit_code(const std::string& text) {
  int value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 0 || value > 255) {
    return std::nullopt;
  }
  return value;
}

/// The options each mode accepts (--help and --version are handled before the mode).
bool allowed(Mode mode, const std::string& name) {
  static const std::set<std::string> everywhere = {
      "url",        "password-file",         "verbose", "json", "version", "help", "resource",
      "positional", "accept-evicting-server"};
  static const std::set<std::string> running = {
      "ttl",      "wait",    "nonblock",           "kill-after",
      "max-hold", "command", "conflict-exit-code", "print-token"};
  if (everywhere.count(name)) return true;
  switch (mode) {
    case Mode::run:
      return running.count(name) || name == "no-renew" || name == "permits" || name == "shared";
    case Mode::elect:
      return running.count(name) || name == "value";
    case Mode::status:
    case Mode::force_release:
    case Mode::observe:
      break;
  }
  return false;
}

/// The subcommands an option applies to (for the message when it is given without one).
std::string applies_to(const std::string& name) {
  std::string out;
  for (const Mode m : {Mode::elect, Mode::status, Mode::force_release, Mode::observe}) {
    if (!allowed(m, name)) continue;
    out += (out.empty() ? "" : ", ") + std::string(mode_name(m));
  }
  return out;
}

}  // namespace

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::elect:
      return "elect";
    case Mode::status:
      return "status";
    case Mode::force_release:
      return "force-release";
    case Mode::observe:
      return "observe";
    case Mode::run:
      break;
  }
  return "";
}

std::string usage() { return usage_text; }

std::optional<milliseconds> parse_duration(std::string_view text) {
  double value = 0;
  auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed);
  if (ec != std::errc{} || end == text.data() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  double ms_per_unit = 0;
  if (unit.empty() || unit == "s")
    ms_per_unit = 1000;
  else if (unit == "ms")
    ms_per_unit = 1;
  else if (unit == "m")
    ms_per_unit = 60'000;
  else if (unit == "h")
    ms_per_unit = 3'600'000;
  else
    return std::nullopt;
  const double ms = std::round(value * ms_per_unit);
  if (ms > static_cast<double>(max_duration.count())) return std::nullopt;
  return milliseconds(static_cast<long long>(ms));
}

Parsed parse_command_line(int argc, const char* const* argv, const char* (*getenv)(const char*)) {
  // Everything after the first "--" is COMMAND, never options of ours.
  std::vector<std::string> ours;
  Options o;
  bool saw_separator = false;
  for (int i = 1; i < argc; ++i) {
    if (!saw_separator && std::strcmp(argv[i], "--") == 0) {
      saw_separator = true;
    } else if (saw_separator) {
      o.command.emplace_back(argv[i]);
    } else {
      ours.emplace_back(argv[i]);
    }
  }

  po::options_description all;
  all.add_options()("url", po::value<std::string>())("password-file", po::value<std::string>())(
      "ttl", po::value<std::string>())("wait,w", po::value<std::string>())(
      "nonblock,n", po::bool_switch())("no-renew", po::bool_switch())(
      "kill-after", po::value<std::string>())("max-hold", po::value<std::string>())(
      "command,c", po::value<std::string>())("conflict-exit-code,E", po::value<std::string>())(
      "print-token", po::bool_switch())("permits", po::value<std::string>())(
      "shared", po::bool_switch())("value", po::value<std::string>())(
      "resource", po::value<std::string>())("verbose,v", po::bool_switch())(
      "json", po::bool_switch())("accept-evicting-server", po::bool_switch())(
      "version,V", po::bool_switch())("help,h", po::bool_switch())(
      "positional", po::value<std::vector<std::string>>());
  po::positional_options_description positional;
  positional.add("positional", -1);
  po::variables_map vm;
  try {
    // No guessing of abbreviations: `--no` must not quietly mean `--nonblock`.
    const int style =
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    const auto parsed =
        po::command_line_parser(ours).options(all).positional(positional).style(style).run();
    for (const auto& option : parsed.options) {
      // The positional arguments' option is ours, not one to type.
      if (option.string_key == "positional" && option.position_key < 0) {
        return fail("unrecognised option '--positional'");
      }
    }
    po::store(parsed, vm);
  } catch (const po::error& e) {
    return fail(e.what());
  }
  const auto flag = [&](const char* name) { return vm[name].as<bool>(); };
  const auto text = [&](const char* name) -> std::optional<std::string> {
    if (!vm.count(name)) return std::nullopt;
    return vm[name].as<std::string>();
  };

  if (flag("help")) return {Parsed::Action::print_and_exit, {}, usage_text};
  if (flag("version")) {
    return {Parsed::Action::print_and_exit, {}, "redis-lock " REDIS_LOCK_VERSION "\n"};
  }

  std::vector<std::string> positionals;
  if (vm.count("positional")) positionals = vm["positional"].as<std::vector<std::string>>();
  if (!positionals.empty()) {
    for (const Mode m : {Mode::elect, Mode::status, Mode::force_release, Mode::observe}) {
      if (positionals.front() != mode_name(m)) continue;
      o.mode = m;
      positionals.erase(positionals.begin());
      break;
    }
  }
  const std::string sub = mode_name(o.mode);
  for (const auto& [name, value] : vm) {
    if (value.defaulted() || allowed(o.mode, name)) continue;
    return fail("--" + name +
                (o.mode == Mode::run ? " applies to a subcommand only (" + applies_to(name) + ")"
                                     : " does not apply to " + sub));
  }
  if (o.mode != Mode::run && o.mode != Mode::elect && !o.command.empty()) {
    return fail(sub + " runs no COMMAND (to lock a RESOURCE named '" + sub +
                "', give it as --resource " + sub + ")");
  }

  if (auto url = text("url")) {
    o.url = *url;
    o.url_from_flag = true;
  } else if (const char* env = getenv("REDIS_LOCK_URL"); env != nullptr && *env != '\0') {
    o.url = env;
  } else {
    o.url = default_url;
  }
  if (auto path = text("password-file")) {
    std::ifstream in(*path);
    if (!in) return fail("cannot read --password-file " + *path + ": " + std::strerror(errno));
    struct stat file {};
    if (::stat(path->c_str(), &file) == 0 && (file.st_mode & (S_IRGRP | S_IROTH)) != 0) {
      o.warnings.push_back("--password-file " + *path +
                           " can be read by other users (chmod 600 it)");
    }
    std::string line;
    std::getline(in, line);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty())
      return fail("--password-file " + *path + " has no password on its first line");
    o.password = std::move(line);
  } else if (const char* env = getenv("REDIS_LOCK_PASSWORD"); env != nullptr && *env != '\0') {
    o.password = env;
  }

  std::optional<milliseconds> ttl;
  const std::pair<const char*, std::optional<milliseconds>*> durations[] = {
      {"ttl", &ttl}, {"wait", &o.wait}, {"kill-after", &o.kill_after}, {"max-hold", &o.max_hold}};
  for (const auto& [name, target] : durations) {
    const auto t = text(name);
    if (!t) continue;
    *target = parse_duration(*t);
    if (!*target) {
      return fail(std::string("bad duration for --") + name + ": '" + *t +
                  "' (a number with ms, s, m or h, at most 10 years)");
    }
  }
  if (ttl) o.ttl = *ttl;
  if (o.ttl < min_ttl) {
    return fail(
        "--ttl must be at least 1s: the renewal, the SIGTERM grace and the SIGKILL "
        "margin must fit in the lease");
  }
  if (o.max_hold && o.max_hold->count() == 0) return fail("--max-hold must be above 0");
  o.nonblock = flag("nonblock");
  o.renew = !flag("no-renew");
  o.print_token = flag("print-token");
  o.verbose = flag("verbose");
  o.json = flag("json");
  o.accept_evicting_server = flag("accept-evicting-server");
  if (auto code = text("conflict-exit-code")) {
    auto value = parse_exit_code(*code);
    if (!value)
      return fail("--conflict-exit-code must be a number from 0 to 255, not '" + *code + "'");
    o.conflict_exit_code = *value;
  }
  if (o.nonblock && o.wait) return fail("--nonblock and --wait exclude each other");
  o.shared = flag("shared");
  if (auto n = text("permits")) {
    std::uint32_t value = 0;
    auto [end, ec] = std::from_chars(n->data(), n->data() + n->size(), value);
    if (ec != std::errc{} || end != n->data() + n->size() || value == 0) {
      return fail("--permits must be a number from 1 to 4294967295, not '" + *n + "'");
    }
    o.permits = value;
  }
  if (o.shared && o.permits != 0) return fail("--permits and --shared exclude each other");

  const bool election = o.mode == Mode::elect || o.mode == Mode::observe;
  const std::string what = election ? "NAME" : "RESOURCE";
  std::string target;
  if (auto given = text("resource")) {
    if (!positionals.empty()) {
      return fail("unexpected argument '" + positionals.front() + "': --resource names the " +
                  what + " already");
    }
    target = *given;
  } else if (positionals.empty()) {
    return fail(o.mode == Mode::run
                    ? "a RESOURCE is required"
                    : sub + " needs a " + what + " (redis-lock " + sub + " " + what + ")");
  } else {
    target = positionals.front();
  }
  if (positionals.size() > 1) {
    return fail("unexpected argument '" + positionals[1] + "': " +
                (o.mode == Mode::run || o.mode == Mode::elect
                     ? "put COMMAND after -- (redis-lock " +
                           (o.mode == Mode::elect ? std::string("elect NAME") : what) +
                           " -- COMMAND ARGS...)"
                     : sub + " takes one " + what));
  }
  if (target.empty()) return fail(what + " must not be empty");
  if (election) {
    o.name = target;
    o.resource = "election:" + target;
  } else {
    o.resource = target;
  }
  if (auto value = text("value")) {
    if (value->size() > max_value_size) {
      return fail("--value is " + std::to_string(value->size()) + " bytes; at most " +
                  std::to_string(max_value_size));
    }
    o.value = *value;
  }
  if (o.mode != Mode::run && o.mode != Mode::elect) return {Parsed::Action::run, std::move(o), {}};
  if (auto shell = text("command")) {
    if (!o.command.empty()) return fail("-c and a COMMAND after -- exclude each other");
    o.command = {"/bin/sh", "-c", *shell};
  }
  if (o.command.empty()) return fail("a COMMAND after -- (or -c 'SHELL COMMAND') is required");
  return {Parsed::Action::run, std::move(o), {}};
}

}  // namespace redis_lock::cli

// SPDX-License-Identifier: MIT
// redis-lock: flock(1) for a fleet. Runs a command while holding a Redis lock, renewing
// it; stops the command's whole process group before the lease can lapse.
#include "diagnose.hpp"
#include "options.hpp"
#include "process.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace redis_lock::cli;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

bool sigpipe_was_ignored = false;

/// The signals passed on to the command (and that end a wait for the lock).
constexpr int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
/// How long the release may take before we say it failed and exit anyway.
constexpr milliseconds release_deadline{2000};
/// A repeat of the same signal within this is the same event (timeout(1) signals our pid and
/// then our group; a second delivery is not a second request).
constexpr milliseconds repeat_window{100};

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

long long ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<milliseconds>(to - from).count();
}

/// One line on stderr, written at once (the command may be writing there too).
template <class... Args>
void say(const char* format, Args... args) {
  char text[1024];
  if constexpr (sizeof...(Args) == 0) {
    std::snprintf(text, sizeof text, "%s", format);
  } else {
    std::snprintf(text, sizeof text, format, args...);
  }
  std::string line = std::string("redis-lock: ") + text + "\n";
  std::fputs(line.c_str(), stderr);
}

/// What happened, for the exit status, the messages and the --json line.
struct Report {
  std::string outcome = "error";
  int exit_code = exit_redis_error;
  std::string error;
  std::uint64_t fencing_token = 0;
  std::optional<long long> waited_ms, held_ms;
  std::optional<int> command_status, command_signal;
  std::optional<bool> released;
};

/// A JSON string: UTF-8 passes through, control characters (C0, DEL, C1) are escaped, and a
/// byte that is not part of valid UTF-8 (an election's value may be any bytes) becomes U+FFFD.
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const auto n = utf8_sequence(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
        char buf[8];  // a C1 control (U+0080..U+009F): escaped like the C0 ones
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
        out += buf;
        i += 2;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

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

redis_lock::ManagerOptions manager_options() {
  redis_lock::ManagerOptions options;
  options.holder_label = holder_label();
  return options;
}

void print_json(const Options& o, const Report& r) {
  const auto number = [](const auto& v) { return v ? std::to_string(*v) : std::string("null"); };
  std::string line = "{\"resource\":" + json_string(o.resource) +
                     ",\"outcome\":" + json_string(r.outcome) +
                     ",\"exit_code\":" + std::to_string(r.exit_code) +
                     ",\"fencing_token\":" + std::to_string(r.fencing_token) +
                     ",\"waited_ms\":" + number(r.waited_ms) + ",\"held_ms\":" + number(r.held_ms) +
                     ",\"command_status\":" + number(r.command_status) +
                     ",\"command_signal\":" + number(r.command_signal) +
                     ",\"released\":" + (r.released ? (*r.released ? "true" : "false") : "null") +
                     ",\"error\":" + (r.error.empty() ? "null" : json_string(r.error)) + "}\n";
  std::fputs(line.c_str(), stderr);
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

/// Why the command is being stopped.
enum class Stop { none, lost, unconfirmed, lease_ending, max_hold };

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

/// Everything the supervising callbacks share (owned by them and the coroutine).
struct Supervision {
  Supervision(asio::any_io_executor ex, const Options& o)
      : options(o),
        caught(signals_to_catch()),
        signals(ex),
        lease_timer(ex),
        kill_timer(ex),
        max_hold_timer(ex),
        poll_timer(ex),
        done(ex) {
    for (int sig : caught) signals.add(sig);
    done.expires_at(Clock::time_point::max());
  }
  const Options& options;
  std::vector<int> caught;
  asio::signal_set signals;
  Clock::time_point last_forward[NSIG] = {};
  asio::steady_timer lease_timer, kill_timer, max_hold_timer, poll_timer, done;
  asio::cancellation_signal cancel_acquire;
  redis_lock::LockGuard* guard = nullptr;
  CommandGroup group;
  Guardian guardian;
  bool running = false;   // the command has been started
  bool finished = false;  // the command and its group are gone
  int early_signal = 0;   // a signal that ended the wait for the lock
  Stop stop = Stop::none;
  milliseconds grace{0}, margin{0};

  void watch_signals(const std::shared_ptr<Supervision>& self) {
    signals.async_wait([self](boost::system::error_code ec, int sig) {
      if (ec || self->finished) return;
      if (sig == SIGCHLD) {
        if (self->running) self->check_group(self);
      } else if (self->running) {
        self->forward(sig);
      } else if (self->early_signal == 0) {
        self->early_signal = sig;
        self->cancel_acquire.emit(asio::cancellation_type::terminal);
      }
      self->watch_signals(self);
    });
  }

  void forward(int sig) {
    const auto now = Clock::now();
    if (now - last_forward[sig] < repeat_window) return;  // the same event, delivered twice
    // A hangup of the terminal the command's group holds reached it from the kernel already.
    if (sig == SIGHUP && group.holds_terminal()) return;
    last_forward[sig] = now;
    if (options.verbose)
      say("passing SIG%s on to process group %d", sigabbrev_np(sig), group.pgid());
    group.signal(sig);
  }

  /// Nothing of ours stays pending: the io_context can run out of work.
  void shutdown() {
    finished = true;
    group.may_continue = nullptr;  // it holds a reference to us: no cycle left behind
    signals.cancel();
    for (auto* t : {&lease_timer, &kill_timer, &max_hold_timer, &poll_timer, &done}) t->cancel();
    guard = nullptr;
  }

  /// Whether the lease leaves time to run the command (before it starts, or continues
  /// after a stop): now is before the SIGTERM point.
  bool lease_leaves_time() const {
    return guard != nullptr && Clock::now() < guard->valid_until() - grace - margin;
  }

  void check_group(const std::shared_ptr<Supervision>& self) {
    if (finished) return;
    const bool alive = group.reap_and_check_alive();
    if (group.exited() && !alive) {
      finished = true;
      done.cancel();
      return;
    }
    if (group.exited()) {
      // The command is gone but not all of its group: orphans reparented to us announce
      // their end with SIGCHLD; this also covers group members we are not the parent of.
      poll_timer.expires_after(50ms);
      poll_timer.async_wait([self](boost::system::error_code ec) {
        if (!ec) self->check_group(self);
      });
    }
  }

  void stop_group(const std::shared_ptr<Supervision>& self, Stop why, const char* message) {
    if (stop != Stop::none) {
      if (why == Stop::lost) stop = why;  // the stronger statement wins
      return;
    }
    stop = why;
    say("%s; stopping the command (SIGTERM to process group %d)", message, group.pgid());
    group.signal(SIGTERM);
    guardian.terminated();
    // SIGKILL when the grace ends, and never later than just before the lease can expire.
    auto kill_at = Clock::now() + grace;
    if (why != Stop::lost) kill_at = std::min(kill_at, guard->valid_until() - margin);
    kill_timer.expires_at(kill_at);
    kill_timer.async_wait([self](boost::system::error_code ec) {
      if (ec || self->finished) return;
      say("the command's process group %d is still running; SIGKILL", self->group.pgid());
      self->group.signal(SIGKILL);
    });
  }

  /// Follows valid_until(): SIGTERM once only the grace and the margin are left of it.
  void watch_lease(const std::shared_ptr<Supervision>& self) {
    const auto valid_until = guard->valid_until();
    guardian.valid_until(valid_until);
    const auto term_at = valid_until - grace - margin;
    if (Clock::now() >= term_at) {
      if (options.renew) {
        stop_group(self, Stop::unconfirmed, "the lease's renewal was not confirmed in time");
      } else {
        stop_group(self, Stop::lease_ending, "the lease (--no-renew) is about to end");
      }
      return;
    }
    // Wake at the deadline, and between renewals to tell the watcher the new validity.
    lease_timer.expires_at(std::min(term_at, Clock::now() + options.ttl / 6));
    lease_timer.async_wait([self](boost::system::error_code ec) {
      if (!ec && !self->finished && self->stop == Stop::none) self->watch_lease(self);
    });
  }
};

/// How a release ended.
struct Released {
  bool replied = false;  // false: no reply within release_deadline
  bool released = false;
  boost::system::error_code ec;
};

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

/// A failed operation (the lock's or a subcommand's): what it says on stderr, and its exit
/// status.
struct Failure {
  std::string message;
  int exit_code;
};

Failure failed(const Options& o, const redis_lock::ConnectionConfig& config,
               const redis_lock::LockManager& locks, boost::system::error_code ec) {
  Failure f{describe_failure(config, ec, locks.last_server_error()),
            // (A database the server does not have comes back as invalid_argument too.)
            ec == redis_lock::error::invalid_argument ? exit_usage : exit_redis_error};
  say("%s: %s", o.resource.c_str(), f.message.c_str());
  return f;
}

asio::awaitable<Report> run(const Options& o, redis_lock::ConnectionConfig config) {
  auto ex = co_await asio::this_coro::executor;
  Report report;
  redis_lock::LockManager locks(ex, config, manager_options());
  std::optional<redis_lock::Election> election;
  if (o.mode == Mode::elect) election.emplace(locks, o.name);
  const char* const held_thing = election ? "leadership" : "lock";
  redis_lock::LockOptions lock_options{.ttl = o.ttl, .auto_renew = o.renew};
  lock_options.wait = o.nonblock ? 0ms : o.wait.value_or(std::chrono::hours(24 * 365 * 10));

  // Signals are ours from the start: while we wait for the lock they cancel the wait (and
  // leave the queue); once the command runs they are passed on to its group.
  auto sv = std::make_shared<Supervision>(ex, o);
  struct ShutdownAtEnd {
    Supervision& sv;
    ~ShutdownAtEnd() { sv.shutdown(); }
  } shutdown_at_end{*sv};
  sv->watch_signals(sv);
  if (o.verbose)
    say("acquiring %s on %s (ttl %lldms)", o.resource.c_str(), describe_target(config).c_str(),
        static_cast<long long>(o.ttl.count()));

  // One attempt first: a server that cannot be reached at the start is a mistake to report
  // at once (a wrong URL must not wait forever). Once it has answered, a waiting acquire
  // rides out outages within its wait, as the library does.
  const auto acquire = [&](const redis_lock::LockOptions& options) {
    auto token = asio::bind_cancellation_slot(sv->cancel_acquire.slot(),
                                              asio::as_tuple(asio::use_awaitable));
    if (election) return election->async_campaign(o.value, options, token);
    if (o.permits != 0) return locks.async_acquire_permit(o.resource, o.permits, options, token);
    if (o.shared) return locks.async_acquire_shared(o.resource, options, token);
    return locks.async_acquire(o.resource, options, token);
  };
  const auto wait_started = Clock::now();
  redis_lock::LockOptions first_try = lock_options;
  first_try.wait = 0ms;
  auto [ec, guard] = co_await acquire(first_try);
  if (!ec && !guard && sv->early_signal == 0 && lock_options.wait.count() > 0) {
    if (o.verbose) {
      say(election ? "%s has another leader; waiting" : "%s is held elsewhere; waiting",
          o.resource.c_str());
    }
    std::tie(ec, guard) = co_await acquire(lock_options);
  }
  report.waited_ms = ms_between(wait_started, Clock::now());
  if (sv->early_signal != 0) {
    report.outcome = "interrupted";
    report.exit_code = 128 + sv->early_signal;
    if (guard) co_await release_and_report(guard, o, report);  // it came with the signal
    co_return report;
  }
  if (ec) {
    auto failure = failed(o, config, locks, ec);
    report.error = std::move(failure.message);
    report.exit_code = failure.exit_code;
    co_return report;
  }
  if (!guard) {
    report.outcome = "not_acquired";
    report.exit_code = o.conflict_exit_code;
    const bool at_once = o.nonblock || lock_options.wait.count() == 0;
    if (election) {
      say(at_once ? "%s has another leader" : "%s has another leader; --wait ran out",
          o.resource.c_str());
    } else {
      say(at_once ? "%s is held elsewhere" : "%s is held elsewhere; --wait ran out",
          o.resource.c_str());
    }
    co_return report;
  }
  report.fencing_token = guard.fencing_token();
  if (o.verbose) {
    say(election ? "leading %s: term %llu, lease valid for %lldms"
                 : "acquired %s: fencing token %llu, lease valid for %lldms",
        o.resource.c_str(), static_cast<unsigned long long>(guard.fencing_token()),
        static_cast<long long>(ms_between(Clock::now(), guard.valid_until())));
  }

  // The grace ends, and SIGKILL comes, before the lease can expire: at most a third of
  // the ttl for the grace (renewals come every third), a small margin for SIGKILL to land.
  sv->guard = &guard;
  sv->grace = std::min(o.kill_after.value_or(default_kill_after), o.ttl / 3);
  if (o.kill_after && sv->grace < *o.kill_after) {
    say("--kill-after %lldms is more than a third of --ttl: the grace is %lldms, so that it "
        "ends before the lease can expire",
        static_cast<long long>(o.kill_after->count()), static_cast<long long>(sv->grace.count()));
  }
  sv->margin = std::clamp(o.ttl / 20, milliseconds(100), milliseconds(1000));
  const auto held_from = Clock::now();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans of the command are ours to wait for
  const auto give_up = [&](int code, const char* what, int err) -> asio::awaitable<Report> {
    report.outcome = code == exit_not_found ? "not_found" : "cannot_run";
    report.exit_code = code;
    report.error = std::string(what) + ": " + std::strerror(err);
    say("%s", report.error.c_str());
    co_await release_and_report(guard, o, report);
    co_return report;
  };
  if (const int err = sv->guardian.start(own_path(), sv->grace, sv->margin); err != 0) {
    co_return co_await give_up(exit_cannot_run, "cannot start the watcher process", err);
  }
  std::vector<int> handled = sv->caught;
  if (!sigpipe_was_ignored) handled.push_back(SIGPIPE);
  if (const int err =
          sv->group.fork(o.command, command_environment(o, guard.fencing_token()), handled);
      err != 0) {
    co_return co_await give_up(exit_cannot_run, "fork", err);
  }
  sv->guardian.watch(sv->group.pgid());
  sv->guardian.valid_until(guard.valid_until());
  if (o.print_token) {
    std::printf("%llu\n", static_cast<unsigned long long>(guard.fencing_token()));
    std::fflush(stdout);
  }
  // A stall since the acquire (a loaded machine, a full stdout for --print-token) must not
  // start the command when it would at once be due for SIGTERM.
  if (!sv->lease_leaves_time()) {
    sv->group.abandon();
    sv->guardian.dismiss();
    report.outcome = "renewal_unconfirmed";
    report.exit_code = exit_lock_lost;
    say("the lease on %s ran short before the command could start; not started",
        o.resource.c_str());
    co_await release_and_report(guard, o, report);
    co_return report;
  }
  if (const int err = sv->group.run(); err != 0) {
    sv->guardian.dismiss();
    co_return co_await give_up(err == ENOENT ? exit_not_found : exit_cannot_run,
                               o.command[0].c_str(), err);
  }
  sv->running = true;
  sv->group.may_continue = [sv] {
    if (sv->lease_leaves_time()) return true;
    sv->stop = sv->options.renew ? Stop::unconfirmed : Stop::lease_ending;
    say("the lease ran short while the command was stopped; SIGKILL to process group %d",
        sv->group.pgid());
    return false;
  };
  if (o.verbose) say("started the command: process group %d", sv->group.pgid());

  guard.async_wait_lost([sv, held_thing](boost::system::error_code lost_ec) {
    if (lost_ec != redis_lock::error::lock_lost || sv->finished) return;
    const std::string why =
        std::string("lost the ") + held_thing + " (its lease expired or passed to another holder)";
    sv->stop_group(sv, Stop::lost, why.c_str());
  });
  sv->watch_lease(sv);
  if (o.max_hold) {
    sv->max_hold_timer.expires_after(*o.max_hold);
    sv->max_hold_timer.async_wait([sv](boost::system::error_code timer_ec) {
      if (!timer_ec && !sv->finished) sv->stop_group(sv, Stop::max_hold, "--max-hold ran out");
    });
  }
  sv->check_group(sv);  // it may be gone already
  if (!sv->finished) co_await sv->done.async_wait(asio::as_tuple(asio::use_awaitable));
  const bool was_lost = guard.lost();
  sv->shutdown();
  sv->group.restore_terminal();
  sv->guardian.dismiss();
  report.held_ms = ms_between(held_from, Clock::now());
  const int status = sv->group.status();
  if (WIFEXITED(status)) {
    report.command_status = WEXITSTATUS(status);
    report.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    report.command_signal = WTERMSIG(status);
    report.exit_code = 128 + WTERMSIG(status);
  }
  report.outcome = outcome_of(sv->stop);
  if (sv->stop == Stop::max_hold)
    report.exit_code = exit_max_hold;
  else if (sv->stop != Stop::none)
    report.exit_code = exit_lock_lost;

  const auto release = co_await release_and_report(guard, o, report);
  if (!release.replied || release.ec) {
    // said; the status stays the command's
  } else if (!release.released && sv->stop == Stop::none && !was_lost) {
    // Not ours any more, though nothing said so in time: the command may have run
    // without the lock at its end.
    say("the lease on %s had expired before the command ended", o.resource.c_str());
    report.outcome = "lost";
    report.exit_code = exit_lock_lost;
  } else if (o.verbose) {
    say("released %s", o.resource.c_str());
  }
  co_return report;
}

/// Writes `text` to stdout at once; false when stdout is gone (a closed pipe).
bool print(const std::string& text) {
  return std::fputs(text.c_str(), stdout) >= 0 && std::fflush(stdout) == 0;
}

const char* kind_name(redis_lock::LockInfo::Kind kind) {
  switch (kind) {
    case redis_lock::LockInfo::Kind::mutex:
      return "mutex";
    case redis_lock::LockInfo::Kind::semaphore:
      return "semaphore";
    case redis_lock::LockInfo::Kind::read_write:
      return "read_write";
    case redis_lock::LockInfo::Kind::none:
      break;
  }
  return "none";
}

std::string seconds(std::chrono::milliseconds ms) {
  char text[64];
  std::snprintf(text, sizeof text, "%lld.%03llds", static_cast<long long>(ms.count() / 1000),
                static_cast<long long>(ms.count() % 1000));
  return text;
}

std::string describe_status(const Options& o, const redis_lock::LockInfo& info) {
  using Kind = redis_lock::LockInfo::Kind;
  if (o.json) {
    return "{\"resource\":" + json_string(o.resource) +
           ",\"held\":" + (info.held ? "true" : "false") + ",\"kind\":\"" + kind_name(info.kind) +
           "\",\"holder\":" + json_string(info.holder) +
           ",\"ttl_left_ms\":" + std::to_string(info.ttl_left.count()) +
           ",\"fencing_token\":" + std::to_string(info.fencing_token) +
           ",\"waiters\":" + std::to_string(info.waiters) +
           ",\"holders\":" + std::to_string(info.holders) +
           ",\"limit\":" + std::to_string(info.limit) +
           ",\"exclusive\":" + (info.exclusive ? "true" : "false") + "}\n";
  }
  std::string out = "resource:      " + printable(o.resource) + "\n";
  out += std::string("held:          ") + (info.held ? "yes" : "no") + "\n";
  if (info.held) {
    switch (info.kind) {
      case Kind::mutex:
        out += "kind:          mutex\n";
        out += "holder:        " + (info.holder.empty() ? "(no label)" : printable(info.holder)) +
               "\n";
        out += "fencing token: " + std::to_string(info.fencing_token) + "\n";
        break;
      case Kind::semaphore:
        out += "kind:          semaphore of " + std::to_string(info.limit) + " permits\n";
        out += "holders:       " + std::to_string(info.holders) + "\n";
        break;
      case Kind::read_write:
        out += "kind:          read-write lock\n";
        out += "holders:       " +
               (info.exclusive ? std::string("1 (exclusive)")
                               : std::to_string(info.holders) + " (shared)") +
               "\n";
        break;
      case Kind::none:
        break;
    }
    out += "ttl left:      " + seconds(info.ttl_left) +
           (info.kind == Kind::mutex ? "" : " (the longest hold)") + "\n";
  }
  out += "waiters:       " + std::to_string(info.waiters) + "\n";
  return out;
}

asio::awaitable<int> status(const Options& o, redis_lock::ConnectionConfig config) {
  redis_lock::LockManager locks(co_await asio::this_coro::executor, config, manager_options());
  const auto [ec, info] =
      co_await locks.async_inspect(o.resource, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return failed(o, config, locks, ec).exit_code;
  print(describe_status(o, info));
  co_return 0;
}

asio::awaitable<int> force_release(const Options& o, redis_lock::ConnectionConfig config) {
  redis_lock::LockManager locks(co_await asio::this_coro::executor, config, manager_options());
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

/// One line for a state of the election: a leader, or nobody after `last_term` (0: none
/// known).
std::string describe_leader(const Options& o, const std::optional<redis_lock::Leader>& leader,
                            std::uint64_t last_term) {
  const std::string term = std::to_string(leader ? leader->term : last_term);
  if (o.json) {
    return "{\"election\":" + json_string(o.name) + ",\"leader\":" + (leader ? "true" : "false") +
           ",\"term\":" + (leader || last_term != 0 ? term : "null") +
           ",\"value\":" + (leader ? json_string(leader->value) : "null") + "}\n";
  }
  if (leader) return "term " + term + ": leader " + json_string(leader->value) + "\n";
  return last_term == 0 ? "nobody leads\n" : "term " + term + " ended: nobody leads\n";
}

/// Prints the election's leader, then each change, until a signal (0), a closed stdout
/// (128+SIGPIPE, as a program killed by it), or (before anything was printed) an error.
asio::awaitable<int> observe(const Options& o, redis_lock::ConnectionConfig config) {
  auto ex = co_await asio::this_coro::executor;
  redis_lock::LockManager locks(ex, config, manager_options());
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

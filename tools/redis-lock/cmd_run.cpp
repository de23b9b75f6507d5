// SPDX-License-Identifier: MIT
// redis-lock run: the command under the lock, supervised (supervision.hpp).
#include "commands.hpp"
#include "diagnose.hpp"
#include "supervision.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

asio::awaitable<Report> run(const Options& o, redis_lock::ConnectionConfig config) {
  auto ex = co_await asio::this_coro::executor;
  Report report;
  redis_lock::LockManager locks(ex, config, manager_options(o));
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

}  // namespace redis_lock::cli

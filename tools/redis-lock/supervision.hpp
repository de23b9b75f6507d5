// SPDX-License-Identifier: MIT
// redis-lock run's supervision: the signals it catches and passes on, the timers that stop
// the command's process group before the lease can lapse, the watcher, and the release at
// the end.
#pragma once

#include "options.hpp"
#include "output.hpp"
#include "process.hpp"

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

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace redis_lock::cli {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// SIGPIPE was ignored when we started (the command inherits that); set by main.
extern bool sigpipe_was_ignored;

/// The signals passed on to the command (and that end a wait for the lock).
inline constexpr int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
/// How long the release may take before we say it failed and exit anyway.
inline constexpr milliseconds release_deadline{2000};
/// A repeat of the same signal within this is the same event (timeout(1) signals our pid and
/// then our group; a second delivery is not a second request).
inline constexpr milliseconds repeat_window{100};

/// The signals we catch: the forwarded ones we did not inherit ignored (under nohup, SIGHUP
/// stays ignored, for the command too), and SIGCHLD.
std::vector<int> signals_to_catch();

inline long long ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<milliseconds>(to - from).count();
}

/// The command's environment: ours without the connection's secrets, plus the lock.
std::vector<std::string> command_environment(const Options& o, std::uint64_t fence);
/// This program's file, for the watcher (so that ps names it redis-lock).
std::string own_path();

/// Why the command is being stopped.
enum class Stop { none, lost, unconfirmed, lease_ending, max_hold };
const char* outcome_of(Stop s);

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
asio::awaitable<Released> release_bounded(redis_lock::LockGuard& guard);
/// Releases `guard` (bounded), records the outcome in `report`, and says on stderr if the
/// release failed or got no reply.
asio::awaitable<Released> release_and_report(redis_lock::LockGuard& guard, const Options& o,
                                             Report& report);

}  // namespace redis_lock::cli

// SPDX-License-Identifier: MIT
// The command's process group and the watcher that stops it if redis-lock dies.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace redis_lock::cli {

/// The command, started in a new process group whose id is its pid. When redis-lock is the
/// terminal's foreground job, alone in it (not in a pipeline), with the terminal as stdin
/// and stdout, the group gets the terminal (so the command can read it, and Ctrl-C reaches
/// the command once, from the terminal) and gives it back at the end.
class CommandGroup {
 public:
  CommandGroup() = default;
  CommandGroup(const CommandGroup&) = delete;
  CommandGroup& operator=(const CommandGroup&) = delete;
  ~CommandGroup();

  /// Forks the command; it waits for run() before it execs. `handled` are the signals this
  /// process catches (the child resets them before exec). errno-style result.
  int fork(const std::vector<std::string>& argv, const std::vector<std::string>& env,
           const std::vector<int>& handled);
  /// Lets it exec; 0, or the errno of the failed exec (the child has exited then).
  int run();
  /// Gives up on a child that was forked but not run (it exits at once), and reaps it.
  void abandon();
  /// Asked when the command, stopped on the terminal (Ctrl-Z), is to continue: false kills
  /// the group instead (its lease ran out meanwhile).
  std::function<bool()> may_continue;
  /// The command's group is the terminal's foreground job now.
  bool holds_terminal() const;

  pid_t pgid() const { return pid_; }
  /// Sends `sig` to every process of the group (once each).
  void signal(int sig) const;
  /// Reaps what has exited (the command, and orphans of it that reparented to us as
  /// subreaper); follows a stopped command on the terminal (Ctrl-Z). Returns whether any
  /// process of the group is left.
  bool reap_and_check_alive();
  bool exited() const { return exited_; }
  int status() const { return status_; }  ///< the wait status of the command
  /// Gives the terminal back (if it was handed over).
  void restore_terminal();

 private:
  pid_t pid_ = -1;
  int go_fd_ = -1;     // write end: one byte lets the child exec
  int error_fd_ = -1;  // read end: the errno of a failed exec, EOF on success
  int terminal_ = -1;  // the terminal handed to the group, or -1
  bool exited_ = false;
  int status_ = 0;
};

/// The watcher: a separate process, in its own session (so neither a terminal hangup nor a
/// signal to redis-lock's process group reaches it), connected by a pipe that carries the
/// lease's validity. If the pipe closes without a goodbye (redis-lock died, even by
/// SIGKILL), it sends SIGTERM to the command's group, and SIGKILL when the grace ends or
/// just before the lease can expire. If redis-lock is alive but does not act in time
/// (stopped, stalled), the watcher stops the group on the same schedule, a little later.
class Guardian {
 public:
  Guardian() = default;
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;
  ~Guardian();

  /// Starts `self` (this program) as the watcher; errno-style result.
  int start(const std::string& self, std::chrono::milliseconds grace,
            std::chrono::milliseconds margin);
  void watch(pid_t pgid);
  void valid_until(std::chrono::steady_clock::time_point t);
  /// redis-lock sent the group SIGTERM itself (the watcher does not repeat it).
  void terminated();
  /// The group is gone: the watcher exits without signalling.
  void dismiss();

 private:
  void send(char kind, long long value);
  int fd_ = -1;
  pid_t pid_ = -1;
};

/// argv[1] of the watcher process.
inline constexpr const char* guardian_flag = "--internal-guardian";
/// The watcher's main: `redis-lock --internal-guardian GRACE_MS MARGIN_MS`, pipe on fd 3.
int guardian_main(int argc, char** argv);

}  // namespace redis_lock::cli

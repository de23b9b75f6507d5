// SPDX-License-Identifier: MIT
#include "process.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

namespace redis_lock::cli {

namespace {

long long monotonic_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

/// The terminal whose foreground job we are, or -1 (not interactive).
int foreground_terminal() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::isatty(fd) && ::tcgetpgrp(fd) == ::getpgrp()) return fd;
  }
  return -1;
}

/// tcsetpgrp from a process that may be in the background: SIGTTOU held meanwhile.
void give_terminal(int fd, pid_t pgid) {
  sigset_t ttou, old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  ::pthread_sigmask(SIG_BLOCK, &ttou, &old);
  ::tcsetpgrp(fd, pgid);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

bool group_exists(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno == EPERM; }

bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

CommandGroup::~CommandGroup() {
  if (go_fd_ >= 0) ::close(go_fd_);  // a child never told to run exits at EOF
  if (error_fd_ >= 0) ::close(error_fd_);
  restore_terminal();
}

int CommandGroup::fork(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = argv, envs = env;
  std::vector<char*> arg_ptrs, env_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  arg_ptrs.push_back(nullptr);
  for (auto& e : envs) env_ptrs.push_back(e.data());
  env_ptrs.push_back(nullptr);
  int go[2], err[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return errno;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(go[0]);
    ::close(go[1]);
    return e;
  }
  const int terminal = foreground_terminal();
  sigset_t none;
  sigemptyset(&none);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {go[0], go[1], err[0], err[1]}) ::close(fd);
    return e;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    if (terminal >= 0) give_terminal(terminal, ::getpid());
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);  // redis-lock ignores it; an ignored signal survives exec
    char byte = 0;
    if (::read(go[0], &byte, 1) != 1) ::_exit(127);  // redis-lock went away first
    // execvpe searches PATH like a shell, and runs a script without "#!" with /bin/sh.
    ::execvpe(arg_ptrs[0], arg_ptrs.data(), env_ptrs.data());
    const int e = errno;
    write_all(err[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // both sides, so it holds whichever runs first
  if (terminal >= 0) {
    give_terminal(terminal, pid);
    terminal_ = terminal;
  }
  ::close(go[0]);
  ::close(err[1]);
  pid_ = pid;
  go_fd_ = go[1];
  error_fd_ = err[0];
  return 0;
}

int CommandGroup::run() {
  const char byte = 1;
  write_all(go_fd_, &byte, 1);
  ::close(go_fd_);
  go_fd_ = -1;
  int exec_errno = 0;
  if (!read_all(error_fd_, &exec_errno, sizeof exec_errno)) exec_errno = 0;  // EOF: exec'd
  ::close(error_fd_);
  error_fd_ = -1;
  return exec_errno;
}

void CommandGroup::signal(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

bool CommandGroup::reap_and_check_alive() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (!exited_) {
    const pid_t done = ::waitpid(pid_, &st, WNOHANG | WUNTRACED);
    if (done == pid_ && WIFSTOPPED(st) && terminal_ >= 0) {
      // Ctrl-Z stopped the command: stop too, so the shell sees the job stopped; when
      // continued in the foreground (fg), hand the terminal back and continue the group.
      give_terminal(terminal_, ::getpgrp());
      ::kill(::getpid(), SIGSTOP);
      if (::tcgetpgrp(terminal_) == ::getpgrp()) give_terminal(terminal_, pid_);
      ::kill(-pid_, SIGCONT);
    } else if (done == pid_ && !WIFSTOPPED(st)) {
      exited_ = true;
      status_ = st;
    }
  }
  // Orphans of the command (we are their subreaper) and any other child that ended.
  for (;;) {
    const pid_t done = ::waitpid(-1, &st, WNOHANG);
    if (done <= 0) break;
    if (done == pid_ && !exited_) {
      exited_ = true;
      status_ = st;
    }
  }
  return group_exists(pid_);
}

void CommandGroup::restore_terminal() {
  if (terminal_ < 0) return;
  if (::tcgetpgrp(terminal_) == pid_) give_terminal(terminal_, ::getpgrp());
  terminal_ = -1;
}

Guardian::~Guardian() {
  if (fd_ >= 0) ::close(fd_);  // without a goodbye: the watcher stops the group
}

int Guardian::start(const std::string& self, std::chrono::milliseconds grace,
                    std::chrono::milliseconds margin) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 3);  // dup2 clears close-on-exec
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::string grace_ms = std::to_string(grace.count()), margin_ms = std::to_string(margin.count());
  std::string self_copy = self, flag = guardian_flag;
  char* argv[] = {self_copy.data(), flag.data(), grace_ms.data(), margin_ms.data(), nullptr};
  char* envp[] = {nullptr};
  const int rc = ::posix_spawn(&pid_, self.c_str(), &actions, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    return rc;
  }
  fd_ = fds[1];
  return 0;
}

void Guardian::send(char kind, long long value) {
  if (fd_ < 0) return;
  char message[1 + sizeof value];
  message[0] = kind;
  std::memcpy(message + 1, &value, sizeof value);
  write_all(fd_, message, sizeof message);
}

void Guardian::watch(pid_t pgid) { send('g', pgid); }

void Guardian::valid_until(std::chrono::steady_clock::time_point t) {
  // steady_clock is CLOCK_MONOTONIC, which the watcher reads.
  send('v', std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

void Guardian::dismiss() {
  send('q', 0);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int guardian_main(int argc, char** argv) {
  if (argc != 4) return 2;
  const long long grace = std::atoll(argv[2]), margin = std::atoll(argv[3]);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  pid_t pgid = 0;
  long long valid_until = LLONG_MAX;
  for (;;) {
    char message[1 + sizeof(long long)];
    if (!read_all(3, message, sizeof message)) break;  // redis-lock is gone
    long long value = 0;
    std::memcpy(&value, message + 1, sizeof value);
    if (message[0] == 'q') return 0;
    if (message[0] == 'g') pgid = static_cast<pid_t>(value);
    if (message[0] == 'v') valid_until = value;
  }
  if (pgid <= 0 || !group_exists(pgid)) return 0;
  ::kill(-pgid, SIGTERM);
  const long long now = monotonic_ms();
  const long long kill_at =
      std::min(now + grace, valid_until == LLONG_MAX ? LLONG_MAX : valid_until - margin);
  while (monotonic_ms() < kill_at) {
    if (!group_exists(pgid)) return 0;
    const timespec tick{0, 10'000'000};  // the group is not our child: nothing to wait on
    ::nanosleep(&tick, nullptr);
  }
  ::kill(-pgid, SIGKILL);
  return 0;
}

}  // namespace redis_lock::cli

// SPDX-License-Identifier: MIT
#include "process.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
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

/// Whether another process shares our process group (a pipeline: `redis-lock … | less`).
bool others_in_our_group() {
  const pid_t self = ::getpid(), group = ::getpgrp();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return true;  // cannot tell: do not take the terminal from anyone
  bool found = false;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) continue;
    char stat[512] = {};
    const std::size_t n = std::fread(stat, 1, sizeof stat - 1, f);
    std::fclose(f);
    const char* paren = std::strrchr(stat, ')');
    if (n == 0 || paren == nullptr) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 && pgrp == group) {
      found = true;
      break;
    }
  }
  ::closedir(proc);
  return found;
}

/// The terminal to hand to the command, or -1: only when we are its foreground job, alone
/// in our process group, and both stdin and stdout are that terminal (in a pipeline or a
/// redirection the command runs in the background group and Ctrl-C comes through us).
int foreground_terminal() {
  if (!::isatty(STDIN_FILENO) || !::isatty(STDOUT_FILENO)) return -1;
  if (::tcgetpgrp(STDIN_FILENO) != ::getpgrp() || others_in_our_group()) return -1;
  return STDIN_FILENO;
}

/// Set when SIGCONT arrives: tells whether raise(SIGTSTP) really stopped us.
volatile sig_atomic_t continued = 0;
void on_continue(int) { continued = 1; }

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

int CommandGroup::fork(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const std::vector<int>& handled) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = argv, envs = env;
  std::vector<char*> arg_ptrs, env_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  arg_ptrs.push_back(nullptr);
  for (auto& e : envs) env_ptrs.push_back(e.data());
  env_ptrs.push_back(nullptr);
  std::vector<int> reset = handled;
  reset.push_back(SIGCONT);
  struct sigaction follow_continue {};
  follow_continue.sa_handler = on_continue;
  sigemptyset(&follow_continue.sa_mask);
  ::sigaction(SIGCONT, &follow_continue, nullptr);
  int go[2], err[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return errno;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(go[0]);
    ::close(go[1]);
    return e;
  }
  const int terminal = foreground_terminal();
  // No signal handler of ours may run in the child: all blocked from before fork until the
  // child has reset them, just before exec.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(go[1]);  // so that the read below sees EOF if redis-lock dies first
    ::close(err[0]);
    ::setpgid(0, 0);
    if (terminal >= 0) ::tcsetpgrp(terminal, ::getpid());  // SIGTTOU is blocked
    char byte = 0;
    ssize_t n = 0;
    do {
      n = ::read(go[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) ::_exit(127);  // redis-lock went away first
    for (int sig : reset) ::signal(sig, SIG_DFL);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    // execvpe searches PATH like a shell, and runs a script without "#!" with /bin/sh.
    ::execvpe(arg_ptrs[0], arg_ptrs.data(), env_ptrs.data());
    const int e = errno;
    write_all(err[1], &e, sizeof e);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(go[0]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(go[1]);
    ::close(err[0]);
    return fork_errno;
  }
  ::setpgid(pid, pid);  // both sides, so it holds whichever runs first
  if (terminal >= 0) {
    give_terminal(terminal, pid);
    terminal_ = terminal;
  }
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
  // EOF: exec'd. A child stopped before its exec (a Ctrl-Z right then) must not freeze us:
  // after a while, take it as started; its stop or exit is seen like any other.
  int exec_errno = 0;
  pollfd p{error_fd_, POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&p, 1, 5000);
  } while (ready < 0 && errno == EINTR);
  if (ready == 1 && !read_all(error_fd_, &exec_errno, sizeof exec_errno)) exec_errno = 0;
  ::close(error_fd_);
  error_fd_ = -1;
  if (exec_errno != 0) {
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    exited_ = true;
    status_ = st;
  }
  return exec_errno;
}

void CommandGroup::abandon() {
  if (go_fd_ >= 0) ::close(go_fd_);  // the child reads EOF and exits
  go_fd_ = -1;
  if (error_fd_ >= 0) ::close(error_fd_);
  error_fd_ = -1;
  if (pid_ > 0 && !exited_) {
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    exited_ = true;
    status_ = st;
  }
  restore_terminal();
}

bool CommandGroup::holds_terminal() const {
  return terminal_ >= 0 && ::tcgetpgrp(terminal_) == pid_;
}

void CommandGroup::signal(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

bool CommandGroup::reap_and_check_alive() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (!exited_) {
    const pid_t done = ::waitpid(pid_, &st, WNOHANG | WUNTRACED);
    if (done == pid_ && WIFSTOPPED(st)) {
      // The command stopped (Ctrl-Z, or a read from the terminal in the background): stop
      // too, so that the shell sees the job stopped. When continued (fg, bg), continue the
      // command, with the terminal if we have it, unless its lease ran out meanwhile. If we
      // did not stop (an orphaned process group discards SIGTSTP), the command stays stopped.
      if (holds_terminal()) give_terminal(terminal_, ::getpgrp());
      continued = 0;
      ::raise(SIGTSTP);
      if (continued) {
        if (terminal_ >= 0 && ::tcgetpgrp(terminal_) == ::getpgrp()) give_terminal(terminal_, pid_);
        ::kill(-pid_, may_continue && !may_continue() ? SIGKILL : SIGCONT);
      }
    } else if (done == pid_) {
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
  if (holds_terminal()) give_terminal(terminal_, ::getpgrp());
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
  for (int fd : {0, 1, 2}) {
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::string grace_ms = std::to_string(grace.count()), margin_ms = std::to_string(margin.count());
  std::string name = self, flag = guardian_flag;
  char* argv[] = {name.data(), flag.data(), grace_ms.data(), margin_ms.data(), nullptr};
  char* envp[] = {nullptr};
  // /proc/self/exe: this very program, even if its file was replaced meanwhile (an upgrade
  // during a long wait); `self` only names it for ps.
  const int rc = ::posix_spawn(&pid_, "/proc/self/exe", &actions, &attr, argv, envp);
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

void Guardian::terminated() { send('t', 0); }

void Guardian::dismiss() {
  send('q', 0);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int guardian_main(int argc, char** argv) {
  if (argc != 4) return 2;
  const long long grace = std::atoll(argv[2]), margin = std::atoll(argv[3]);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP}) {
    ::signal(sig, SIG_IGN);
  }
  // The same schedule as redis-lock's, half a margin later, so that it only acts when
  // redis-lock did not (gone, stopped, stalled): SIGTERM at valid_until - grace - margin/2,
  // SIGKILL at valid_until - margin/2 or when the grace ends.
  pid_t pgid = 0;
  long long valid_until = LLONG_MAX, kill_at = LLONG_MAX;
  bool term_sent = false, parent_gone = false;
  const auto send_term = [&](long long now) {
    if (!term_sent) ::kill(-pgid, SIGTERM);
    term_sent = true;
    kill_at =
        std::min(now + grace, valid_until == LLONG_MAX ? LLONG_MAX : valid_until - margin / 2);
  };
  for (;;) {
    const long long now = monotonic_ms();
    if (pgid > 0) {
      if (!group_exists(pgid)) return 0;
      if (valid_until != LLONG_MAX && !term_sent && now >= valid_until - grace - margin / 2) {
        send_term(now);
      }
      if (now >= kill_at) {
        ::kill(-pgid, SIGKILL);
        return 0;
      }
    }
    if (parent_gone) {
      if (pgid <= 0) return 0;
      if (!term_sent) send_term(now);
      const timespec tick{0, 10'000'000};  // the group is not our child: nothing to wait on
      ::nanosleep(&tick, nullptr);
      continue;
    }
    long long next =
        std::min(kill_at, valid_until == LLONG_MAX || term_sent ? LLONG_MAX
                                                                : valid_until - grace - margin / 2);
    if (term_sent) next = std::min(next, now + 10);  // watch for the group's end
    const int timeout =
        next == LLONG_MAX ? -1 : static_cast<int>(std::clamp(next - now, 0LL, 1000LL));
    pollfd p{3, POLLIN, 0};
    const int ready = ::poll(&p, 1, timeout);
    if (ready < 0 && errno != EINTR) return 1;
    if (ready <= 0) continue;
    char message[1 + sizeof(long long)];
    if (!read_all(3, message, sizeof message)) {  // redis-lock is gone
      parent_gone = true;
      continue;
    }
    long long value = 0;
    std::memcpy(&value, message + 1, sizeof value);
    if (message[0] == 'q') return 0;
    if (message[0] == 'g') pgid = static_cast<pid_t>(value);
    if (message[0] == 'v') valid_until = value;
    if (message[0] == 't') {
      term_sent = true;  // redis-lock did it; its SIGKILL timer runs, ours is the backstop
      kill_at = std::min(monotonic_ms() + grace + margin / 2,
                         valid_until == LLONG_MAX ? LLONG_MAX : valid_until - margin / 2);
    }
  }
}

}  // namespace redis_lock::cli

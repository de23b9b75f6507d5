// SPDX-License-Identifier: MIT
// A helper process started by a test, with its stdout readable, killed with SIGKILL at will.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace redis_lock::test {

/// How a ChildProcess is started, beyond its argv.
struct SpawnOptions {
  std::vector<std::string> set_env{};    ///< "NAME=value" entries added to (or replacing) ours
  std::vector<std::string> unset_env{};  ///< names removed from the environment
  bool own_group = false;                ///< in a new process group (as timeout(1) starts one)
  bool stderr_too = false;               ///< stderr goes to the same pipe as stdout
  bool close_other_fds = true;           ///< nothing of ours but stdin/stdout/stderr leaks in
};

class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> argv, SpawnOptions options = {}) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // stdin is never the developer's terminal (a command could take it over).
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    if (options.stderr_too) posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    if (options.close_other_fds) posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    if (options.own_group) {
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
      posix_spawnattr_setpgroup(&attr, 0);
    }
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      bool keep = true;
      for (const auto& n : options.unset_env) keep = keep && n != name;
      for (const auto& v : options.set_env) keep = keep && v.substr(0, v.find('=')) != name;
      if (keep) env.push_back(entry);
    }
    env.insert(env.end(), options.set_env.begin(), options.set_env.end());
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &actions, &attr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      throw std::runtime_error("posix_spawn " + argv[0]);
    }
    out_ = ::fdopen(fds[0], "r");
  }
  ~ChildProcess() {
    kill9();
    if (out_ != nullptr) std::fclose(out_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// One line of the child's output without its newline; empty at end of output.
  std::string read_line() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, out_) == nullptr) return {};
    std::string line = buf;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  /// Everything the child writes until it closes its output.
  std::string read_all() {
    std::string all;
    char buf[512];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, out_)) > 0;) all.append(buf, n);
    return all;
  }
  pid_t pid() const { return pid_; }
  /// Waits for the child to exit; returns its exit status (-1 if killed by a signal).
  int wait() {
    if (pid_ <= 0) return -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait();
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

}  // namespace redis_lock::test

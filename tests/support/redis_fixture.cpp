// SPDX-License-Identifier: MIT
// CTest fixture: `redis_fixture start STATE [ARGS...]` starts a redis-server on a free loopback
// port and writes "port pid dir keeper" to STATE; `redis_fixture stop STATE` stops it and
// cleans up.
//
// Nothing it started outlives the run that started it:
// - the server is the child of a keeper process, which kills it (and removes its directory)
//   when `stop` asks, or when the process that ran `start` (ctest) has exited, whichever
//   comes first: a run interrupted with SIGINT or killed leaves no server behind. The server
//   dies with its keeper (PR_SET_PDEATHSIG), also if the keeper is killed.
// - `start` first stops the server STATE names, if it is still ours: `ctest --repeat` runs
//   the start more often than the stop, and an interrupted run leaves the file behind.
#include "redis_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct State {
  unsigned port = 0;
  int pid = 0;      // the redis-server
  std::string dir;  // its working directory, /tmp/redis_lock_test_*
  int keeper = 0;   // its keeper (0 in a state file of an older build)
};

std::optional<State> read_state(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  State s;
  char dir[4096] = {};
  const int n = std::fscanf(f, "%u %d %4095s %d", &s.port, &s.pid, dir, &s.keeper);
  std::fclose(f);
  if (n < 2) return std::nullopt;
  s.dir = dir;
  return s;
}

bool ours(const std::string& dir) { return dir.rfind("/tmp/redis_lock_test_", 0) == 0; }

/// Whether `pid` is alive and still the process STATE recorded: a server whose working
/// directory is `dir`, or a keeper that runs this program (a pid may have been reused).
bool is_server(int pid, const std::string& dir) {
  std::error_code ec;
  return pid > 0 && ours(dir) &&
         fs::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec) == dir;
}
bool is_keeper(int pid) {
  std::error_code ec, self_ec;
  const auto exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return pid > 0 && !ec && exe == fs::read_symlink("/proc/self/exe", self_ec);
}

bool gone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// Stops what `s` names, if it is still ours, and removes its directory.
void stop(const State& s) {
  if (s.keeper > 0 && is_keeper(s.keeper)) ::kill(s.keeper, SIGTERM);
  if (is_server(s.pid, s.dir)) {
    ::kill(s.pid, SIGCONT);  // a test may have left it stopped (SIGSTOP)
    ::kill(s.pid, SIGKILL);
  }
  // Both gone before we return (the keeper removes the directory; we do too, in case).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until &&
         ((s.keeper > 0 && !gone(s.keeper) && is_keeper(s.keeper)) ||
          (!gone(s.pid) && is_server(s.pid, s.dir)))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ours(s.dir)) {
    std::error_code ec;
    fs::remove_all(s.dir, ec);
  }
}

volatile std::sig_atomic_t stop_asked = 0;
extern "C" void on_term(int) { stop_asked = 1; }

/// The keeper: runs the server until `stop` (SIGTERM) or until `watched` has exited. Reports
/// "port pid dir" on `report`, then closes it.
[[noreturn]] void keep(int report, pid_t watched, const std::vector<std::string>& extra) {
  ::setsid();  // not in ctest's process group: a terminal's ^C reaches ctest, which ends us
  struct sigaction sa {};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  const int devnull = ::open("/dev/null", O_RDWR);
  ::dup2(devnull, 0);
  ::dup2(devnull, 1);
  ::dup2(devnull, 2);  // a CTest fixture must not leave its output pipe open
  int code = 0;
  try {
    redis_lock::test::RedisServer server(extra, /*die_with_parent=*/true);
    const auto line = std::to_string(server.port()) + " " + std::to_string(server.pid()) + " " +
                      server.dir() + "\n";
    [[maybe_unused]] auto n = ::write(report, line.data(), line.size());
    ::close(report);
    // Wait for the watched process's end: a pidfd where the kernel has them (5.3), else poll.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, watched, 0));
    while (!stop_asked) {
      if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        if (::poll(&p, 1, 1000) > 0) break;
      } else {
        if (gone(watched)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
  } catch (...) {
    ::close(report);  // the parent reads nothing: start fails
    code = 1;
  }
  std::_Exit(code);  // the server was stopped and its directory removed above
}

int start(const std::string& path, const std::vector<std::string>& extra) {
  if (auto previous = read_state(path)) {
    stop(*previous);
    std::cout << "stopped the previous redis-server pid " << previous->pid << "\n";
  }
  std::remove(path.c_str());
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return 1;  // not inherited by the redis-server
  const pid_t watched = ::getppid();           // ctest, or the shell that ran us
  std::cout.flush();
  const pid_t keeper = ::fork();
  if (keeper < 0) return 1;
  if (keeper == 0) {
    ::close(fds[0]);
    keep(fds[1], watched, extra);
  }
  ::close(fds[1]);
  std::string line;
  char buf[512];
  while (line.empty() || line.back() != '\n') {  // one line, or the keeper's end
    const auto n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (line.empty() || line.back() != '\n') {
    std::cerr << "redis_fixture: could not start redis-server\n";
    return 1;
  }
  line.pop_back();
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    ::kill(keeper, SIGTERM);
    return 1;
  }
  std::fprintf(f, "%s %d\n", line.c_str(), static_cast<int>(keeper));
  std::fclose(f);
  std::cout << "redis-server (port pid dir) " << line << ", kept by pid " << keeper << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: redis_fixture start|stop STATE [redis-server args...]\n";
    return 2;
  }
  const std::string verb = argv[1];
  const std::string state = argv[2];
  if (verb == "start") return start(state, std::vector<std::string>(argv + 3, argv + argc));
  if (verb == "stop") {
    if (auto s = read_state(state)) {
      stop(*s);
      std::cout << "stopped redis-server pid " << s->pid << "\n";
    }
    std::remove(state.c_str());
    return 0;
  }
  std::cerr << "unknown verb " << verb << "\n";
  return 2;
}

// SPDX-License-Identifier: MIT
// The redis-lock command-line tool, run as a real process against a real server.
#include "live.hpp"

#include "child_process.hpp"
#include "keys.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

std::string url() { return "redis://127.0.0.1:" + std::to_string(shared_server_port()); }

std::vector<std::string> cli(std::vector<std::string> args) {
  args.insert(args.begin(), {REDIS_LOCK_CLI_PATH, "--url", url()});
  return args;
}

bool wait_until_exists(const std::string& key, bool exists) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    if ((redis_command(shared_server_port(), {"EXISTS", key}) == "1") == exists) return true;
    std::this_thread::sleep_for(5ms);  // polling Redis: there is no signal for "locked"
  }
  return false;
}

/// A scratch directory, removed with what is in it.
struct ScratchDir {
  ScratchDir() {
    char tmpl[] = "/tmp/redis_lock_cli_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path = tmpl;
  }
  ~ScratchDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

/// No process of the group runs any more. (kill(-pgid, 0) would also count zombies, which
/// stay until their new parent, init here, reaps them: they run nothing.)
bool group_gone(pid_t pgid) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 1));
    char state = 0;
    long ppid = 0, pgrp = 0;
    fields >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z' && state != 'X') return false;
  }
  return true;
}

/// The redis-cli command line a test command uses to leave a mark in the shared server
/// (its clock and order are the server's, whatever the processes' scheduling).
std::string mark(const std::string& list, const std::string& what) {
  return "redis-cli -p " + std::to_string(shared_server_port()) + " RPUSH " + list + " " + what +
         " >/dev/null";
}

std::vector<std::string> marks(const std::string& list) {
  const auto all = redis_command(shared_server_port(), {"LRANGE", list, "0", "-1"});
  std::vector<std::string> out;
  std::istringstream in(all);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

/// Holds `resource` from the test process until destroyed.
struct Holder {
  explicit Holder(const std::string& resource, ConnectionConfig config = shared_server_config())
      : locks(io.get_executor(), config) {
    locks.async_acquire(resource, {.ttl = 30s},
                        [&](boost::system::error_code, LockGuard g) { guard = std::move(g); });
    io.run_for(5s);
  }
  ~Holder() {
    guard.async_release([](boost::system::error_code, bool) {});
    io.restart();
    io.run_for(5s);
  }
  asio::io_context io;
  LockManager locks;
  LockGuard guard;
};

}  // namespace

TEST(Cli, ConcurrentInvocationsNeverOverlap) {
  const auto resource = unique_resource();
  char path[] = "/tmp/redis_lock_cli_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  // Appends are ordered: whatever the clocks, no overlap means every "start" line is
  // followed by the "end" line of the same shell.
  const std::string script =
      std::string("echo \"$$ start\" >> ") + path + "; sleep 0.1; echo \"$$ end\" >> " + path;
  std::vector<std::unique_ptr<ChildProcess>> runs;
  for (int i = 0; i < 4; ++i) {
    runs.push_back(
        std::make_unique<ChildProcess>(cli({"--wait", "30s", resource, "--", "sh", "-c", script})));
  }
  for (auto& r : runs) EXPECT_EQ(r->wait(), 0);
  std::vector<std::pair<std::string, std::string>> lines;  // shell pid, start or end
  std::ifstream in(path);
  for (std::string pid, what; in >> pid >> what;) lines.emplace_back(pid, what);
  std::remove(path);
  ASSERT_EQ(lines.size(), 8u);
  std::set<std::string> shells;
  for (std::size_t i = 0; i < lines.size(); i += 2) {
    EXPECT_EQ(lines[i].second, "start");
    EXPECT_EQ(lines[i + 1], std::make_pair(lines[i].first, std::string("end")))
        << "two commands ran at once";
    shells.insert(lines[i].first);
  }
  EXPECT_EQ(shells.size(), 4u);
}

// --permits N: at most N commands at once; every one of them runs. --shared: readers run
// together, and never beside a program's exclusive hold.
TEST(Cli, PermitsBoundTheCommandsRunningAtOnceAndSharedHoldersRunTogether) {
  const auto resource = unique_resource();
  char path[] = "/tmp/redis_lock_cli_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  // Each command appends +1 when it starts and -1 when it ends: the running sum, read in
  // append order, is how many ran at once.
  const std::string script = std::string("echo 1 >> ") + path + "; sleep 0.5; echo -1 >> " + path;
  std::vector<std::unique_ptr<ChildProcess>> runs;
  for (int i = 0; i < 5; ++i) {
    runs.push_back(std::make_unique<ChildProcess>(
        cli({"--permits", "2", "--wait", "30s", resource, "--", "sh", "-c", script})));
  }
  for (auto& r : runs) EXPECT_EQ(r->wait(), 0);
  std::ifstream in(path);
  int running = 0, peak = 0, started = 0;
  for (int step; in >> step;) {
    running += step;
    started += step > 0;
    peak = std::max(peak, running);
  }
  EXPECT_EQ(started, 5);
  EXPECT_EQ(peak, 2) << "more than 2 at once, or never 2";
  EXPECT_EQ(redis_command(shared_server_port(), {"EXISTS", lease_key(resource)}), "0");

  // Shared: both readers hold at once (each waits for the other's file), while a writer
  // in this process cannot get in.
  const auto rw = unique_resource("rw");
  const std::string a = std::string(path) + ".a", b = std::string(path) + ".b";
  // Each reader waits (10 s at most) for the other's file, then for the test's "done": both
  // hold their shared lock while the test tries the writer.
  const std::string done = std::string(path) + ".done";
  const auto wait_for = [](const std::string& file) {
    return "i=0; while [ ! -e " + file + " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ";
  };
  const auto reader = [&](const std::string& mine, const std::string& theirs) {
    return std::make_unique<ChildProcess>(cli(
        {"--shared", "--wait", "30s", rw, "--", "sh", "-c",
         "touch " + mine + "; " + wait_for(theirs) + wait_for(done) + "[ -e " + theirs + " ]"}));
  };
  auto r1 = reader(a, b);
  auto r2 = reader(b, a);
  wait_until([&] { return std::ifstream(a).good() && std::ifstream(b).good(); }, 10s,
             "both readers to run");
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  std::optional<bool> writer;
  locks.async_acquire_exclusive(rw, {.ttl = 5s}, [&](boost::system::error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    writer = g.owns_lock();
  });
  io.run_for(5s);
  EXPECT_EQ(writer, std::optional<bool>(false)) << "a writer beside two readers";
  std::ofstream(done).put('\n');
  EXPECT_EQ(r1->wait(), 0) << "the readers did not run together";
  EXPECT_EQ(r2->wait(), 0) << "the readers did not run together";
  std::remove(done.c_str());
  std::remove(path);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST(Cli, CommandSeesTheLockInItsEnvironment) {
  const auto resource = unique_resource();
  ChildProcess run(
      cli({resource, "--", "sh", "-c", "echo \"$REDIS_LOCK_RESOURCE $REDIS_LOCK_FENCING_TOKEN\""}));
  std::istringstream line(run.read_line());
  std::string got_resource;
  unsigned long long fence = 0;
  line >> got_resource >> fence;
  EXPECT_EQ(run.wait(), 0);
  EXPECT_EQ(got_resource, resource);
  EXPECT_GT(fence, 0u);
  EXPECT_EQ(redis_command(shared_server_port(), {"EXISTS", lease_key(resource)}), "0")
      << "released when the command exited";
}

TEST(Cli, ExitCodes) {
  const auto resource = unique_resource();
  EXPECT_EQ(ChildProcess(cli({resource, "--", "sh", "-c", "exit 7"})).wait(), 7);
  EXPECT_EQ(ChildProcess(cli({resource, "--", "/no/such/command"})).wait(), 127);
  EXPECT_EQ(ChildProcess({REDIS_LOCK_CLI_PATH, resource}).wait(), 2);  // no command
  EXPECT_EQ(ChildProcess({REDIS_LOCK_CLI_PATH, "--ttl", "soon", resource, "--", "true"}).wait(), 2);
  ChildProcess bad_url(
      {REDIS_LOCK_CLI_PATH, "--url", "redis://:s3cret@host:6r5", resource, "--", "true"},
      {.stderr_too = true});
  EXPECT_EQ(bad_url.read_line(), "redis-lock: bad URL: port is not a number");
  EXPECT_EQ(bad_url.wait(), 2);
  EXPECT_EQ(ChildProcess({REDIS_LOCK_CLI_PATH, "--url", "redis://:s3cret@host:99999", resource,
                          "--", "true"})
                .wait(),
            2);
  EXPECT_EQ(
      ChildProcess({REDIS_LOCK_CLI_PATH, "--url",
                    "redis://127.0.0.1:" + std::to_string(free_port()), resource, "--", "true"})
          .wait(),
      3);
}

TEST(Cli, NonblockExitsOneWhenHeldElsewhere) {
  const auto resource = unique_resource();
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  LockGuard held;
  locks.async_acquire(resource, {.ttl = 30s},
                      [&](boost::system::error_code, LockGuard g) { held = std::move(g); });
  io.run_for(5s);
  ASSERT_TRUE(held);
  ChildProcess run(cli({"--nonblock", resource, "--", "sh", "-c", "echo ran"}));
  EXPECT_EQ(run.read_line(), "") << "the command must not run";
  EXPECT_EQ(run.wait(), 1);
  EXPECT_EQ(ChildProcess(cli({"--wait", "200ms", resource, "--", "true"})).wait(), 1);
}

TEST(Cli, LostLockTerminatesTheCommand) {
  const auto resource = unique_resource();
  ChildProcess run(cli({"--ttl", "2s", "--kill-after", "2s", resource, "--", "sleep", "30"}));
  ASSERT_TRUE(wait_until_exists(lease_key(resource), true));
  const auto start = std::chrono::steady_clock::now();
  // Someone else owns the key now: the next renewal is refused.
  redis_command(shared_server_port(), {"SET", lease_key(resource), "intruder", "PX", "30000"});
  EXPECT_EQ(run.wait(), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(redis_command(shared_server_port(), {"GET", lease_key(resource)}), "intruder");
}

TEST(Cli, SignalsArePassedOnAndTheLockIsReleased) {
  const auto resource = unique_resource();
  ChildProcess run(cli({resource, "--", "sleep", "30"}));
  ASSERT_TRUE(wait_until_exists(lease_key(resource), true));
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait(), 128 + SIGTERM);  // sleep died of the SIGTERM we passed on
  EXPECT_EQ(redis_command(shared_server_port(), {"EXISTS", lease_key(resource)}), "0");
}

TEST(Cli, CommandIgnoringSigtermIsKilledAfterKillAfter) {
  // The command notes SIGTERM and runs on: SIGKILL comes when --kill-after has passed.
  const auto resource = unique_resource();
  ChildProcess run(cli({"--ttl", "3s", "--kill-after", "300ms", resource, "--", "sh", "-c",
                        "trap 'echo term' TERM; echo ready; while :; do sleep 0.02; done"}));
  ASSERT_EQ(run.read_line(), "ready");
  redis_command(shared_server_port(), {"SET", lease_key(resource), "intruder", "PX", "30000"});
  ASSERT_EQ(run.read_line(), "term");
  const auto termed = std::chrono::steady_clock::now();
  EXPECT_EQ(run.wait(), 4);
  const auto took = std::chrono::steady_clock::now() - termed;
  EXPECT_GE(took, 250ms) << "SIGKILL came with the SIGTERM";  // (the trap runs <= 20 ms late)
  EXPECT_LT(took, 3s);
}

TEST(Cli, SignalWhileWaitingEndsTheWaitAndLeavesTheQueue) {
  const auto resource = unique_resource();
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  LockGuard held;
  locks.async_acquire(resource, {.ttl = 30s},
                      [&](boost::system::error_code, LockGuard g) { held = std::move(g); });
  io.run_for(5s);
  ASSERT_TRUE(held);
  ChildProcess run(cli({"--wait", "30s", resource, "--", "sh", "-c", "echo ran"}));
  const auto queue = detail::make_keys("lock:", resource).queue();
  ASSERT_TRUE(wait_until_exists(queue, true));
  run.signal(SIGTERM);
  EXPECT_EQ(run.read_line(), "") << "the command must not run";
  EXPECT_EQ(run.wait(), 128 + SIGTERM);
  // Left before exiting (not after the place's own expiry, 1.2 s later).
  EXPECT_EQ(redis_command(shared_server_port(), {"ZCARD", queue}), "0")
      << "the cancelled wait stayed queued";
}

TEST(Cli, CommandThatCannotBeStartedExits126) {
  ScratchDir dir;
  std::ofstream(dir.file("data")) << "not a program\n";
  ::chmod(dir.file("data").c_str(), 0644);  // not executable: execve fails with EACCES
  EXPECT_EQ(ChildProcess(cli({unique_resource(), "--", dir.file("data")})).wait(), 126);
}

TEST(Cli, UrlComesFromTheEnvironmentWithoutTheFlag) {
  const auto resource = unique_resource();
  const std::string nowhere = "redis://127.0.0.1:" + std::to_string(free_port());
  // Nothing listens at `nowhere`: exit 3 shows the variable was used (whatever may listen
  // on the default port).
  EXPECT_EQ(ChildProcess({"/usr/bin/env", "REDIS_LOCK_URL=" + nowhere, REDIS_LOCK_CLI_PATH,
                          resource, "--", "true"})
                .wait(),
            3);
  EXPECT_EQ(ChildProcess({"/usr/bin/env", "REDIS_LOCK_URL=" + url(), REDIS_LOCK_CLI_PATH, resource,
                          "--", "true"})
                .wait(),
            0);
}

TEST(Cli, ThePasswordInTheUrlNeverReachesStderr) {
  const auto resource = unique_resource();
  // A refused AUTH (the shared server has no password) and an unreachable server: both
  // report an error on stderr, neither may print the password.
  for (const auto& target : {"redis://:s3cr3t-pw@127.0.0.1:" + std::to_string(shared_server_port()),
                             "redis://user:s3cr3t-pw@127.0.0.1:" + std::to_string(free_port()),
                             std::string("redis://:s3cr3t-pw@127.0.0.1:99999")}) {
    ChildProcess p({"/bin/sh", "-c", std::string("exec \"$0\" --url \"$1\" \"$2\" -- true 2>&1"),
                    REDIS_LOCK_CLI_PATH, target, resource});
    std::string all;
    for (auto line = p.read_line(); !line.empty(); line = p.read_line()) all += line + "\n";
    EXPECT_NE(p.wait(), 0) << target;
    EXPECT_FALSE(all.empty()) << "no error message for " << target;
    EXPECT_EQ(all.find("s3cr3t-pw"), std::string::npos) << all;
  }
}

TEST(Cli, NoRenewStopsTheCommandBeforeTheLeaseEnds) {
  // Decided: --no-renew bounds the command by the lease, as a lost lock does. SIGTERM
  // comes while the lease still has the grace and a margin left (the command sees a
  // positive PTTL in its handler), and the status is 4, said on stderr.
  const auto resource = unique_resource();
  const std::string pttl = "redis-cli -p " + std::to_string(shared_server_port()) + " PTTL '" +
                           lease_key(resource) + "'";
  ChildProcess run(cli({"--ttl", "3s", "--no-renew", resource, "--", "sh", "-c",
                        "trap 'echo \"pttl $(" + pttl +
                            ")\"; exit 0' TERM; echo started; "
                            "while :; do sleep 0.02; done"}),
                   {.stderr_too = true});
  EXPECT_EQ(run.read_line(), "started");
  const auto rest = run.read_all();
  EXPECT_EQ(run.wait(), 4) << rest;
  EXPECT_NE(rest.find("about to end"), std::string::npos) << rest;
  const auto at = rest.find("pttl ");
  ASSERT_NE(at, std::string::npos) << rest;
  EXPECT_GT(std::stoll(rest.substr(at + 5)), 0) << "SIGTERM came after the lease ended: " << rest;
}

TEST(Cli, GrandchildrenGetTheSignalAndTheLockWaitsForThem) {
  // SIGTERM to redis-lock reaches the whole group; the lock stays held until the last
  // process of the group (a grandchild with a slow SIGTERM handler) has exited.
  const auto resource = unique_resource();
  const auto events = unique_resource("events");
  ChildProcess run(cli({resource, "--", "sh", "-c",
                        "(trap '" + mark(events, "cleaned") +
                            "; exit 0' TERM; echo ready; "
                            "while :; do sleep 0.02; done) & wait; echo shell-done"}));
  ASSERT_EQ(run.read_line(), "ready");
  run.signal(SIGTERM);
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  bool acquired = false;
  locks.async_acquire(resource, {.ttl = 5s, .wait = 20s},
                      [&](boost::system::error_code ec, LockGuard g) {
                        EXPECT_FALSE(ec) << ec.message();
                        acquired = g.owns_lock();
                        redis_command(shared_server_port(), {"RPUSH", events, "next-holder"});
                      });
  io.run_for(25s);
  EXPECT_TRUE(acquired);
  EXPECT_EQ(run.wait(), 128 + SIGTERM);  // the shell itself died of the SIGTERM
  EXPECT_EQ(marks(events), (std::vector<std::string>{"cleaned", "next-holder"}));
}

TEST(Cli, ASignalToRedisLocksGroupReachesTheCommandOnce) {
  // As timeout(1) does, redis-lock's pid and then its process group are signalled: the
  // command, in a group of its own, gets the signal once (passed on), not twice.
  const auto resource = unique_resource();
  const auto events = unique_resource("events");
  ChildProcess run(cli({resource, "--", "sh", "-c",
                        "trap '" + mark(events, "TERM") +
                            "; stop=1' TERM; echo ready; "
                            "while [ -z \"$stop\" ]; do sleep 0.02; done; sleep 0.5"}),
                   {.own_group = true});
  ASSERT_EQ(run.read_line(), "ready");
  ASSERT_EQ(::kill(run.pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(-run.pid(), SIGTERM), 0);
  EXPECT_EQ(run.wait(), 0);
  EXPECT_EQ(marks(events), (std::vector<std::string>{"TERM"}));
}

TEST(Cli, CtrlCOnATerminalReachesTheCommandOnce) {
  // On a terminal the command's group is the foreground job while it runs: Ctrl-C comes
  // from the terminal, once, and redis-lock does not pass on a second one.
  const auto resource = unique_resource();
  const auto events = unique_resource("events");
  std::vector<std::string> args = cli({resource, "--", "sh", "-c",
                                       "trap '" + mark(events, "INT") +
                                           "; stop=1' INT; "
                                           "echo ready; while [ -z \"$stop\" ]; do sleep 0.02; "
                                           "done; sleep 0.5"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int terminal = -1;
  const pid_t pid = ::forkpty(&terminal, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::string seen;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (seen.find("ready") == std::string::npos && std::chrono::steady_clock::now() < until) {
    pollfd p{terminal, POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) {
      char buf[256];
      const auto n = ::read(terminal, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<std::size_t>(n));
    }
  }
  ASSERT_NE(seen.find("ready"), std::string::npos) << seen;
  ASSERT_EQ(::write(terminal, "\x03", 1), 1);
  int status = 0;
  bool exited = false;
  for (auto end = std::chrono::steady_clock::now() + 10s;
       !exited && std::chrono::steady_clock::now() < end;) {
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
    char buf[256];
    pollfd p{terminal, POLLIN, 0};
    if (!exited && ::poll(&p, 1, 20) == 1 && ::read(terminal, buf, sizeof buf) <= 0) {
      std::this_thread::sleep_for(20ms);  // the terminal closed: the exit is near
    }
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(terminal);
  ASSERT_TRUE(exited) << "redis-lock did not exit";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(marks(events), (std::vector<std::string>{"INT"}));
}

TEST(Cli, KilledRedisLockTakesItsCommandGroupWithIt) {
  // kill -9 of redis-lock: its watcher gives the whole group SIGTERM, once.
  const auto resource = unique_resource();
  const auto events = unique_resource("events");
  ChildProcess run(cli({resource, "--", "sh", "-c",
                        "trap '" + mark(events, "shell") +
                            "; exit 0' TERM; "
                            "(trap '" +
                            mark(events, "grandchild") +
                            "; exit 0' TERM; "
                            "echo ready; while :; do sleep 0.02; done) & echo $$; "
                            "while :; do sleep 0.02; done"}));
  // Both lines, in either order: the group's id and the grandchild's trap being set.
  const auto first = run.read_line(), second = run.read_line();
  ASSERT_TRUE(first == "ready" || second == "ready") << first << " / " << second;
  const pid_t group = std::stoi(first == "ready" ? second : first);
  run.kill9();
  wait_until([&] { return group_gone(group); }, 10s, "the command's group to end");
  auto got = marks(events);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"grandchild", "shell"}));
}

TEST(Cli, KilledRedisLockSigkillsAStubbornGroupBeforeTheLeaseEnds) {
  // The watcher's SIGKILL comes when the grace ends (at most ttl/3) and before the lease
  // can expire: when the group is gone, the lease still has time left.
  const auto resource = unique_resource();
  ChildProcess run(cli({"--ttl", "3s", "--kill-after", "30s", resource, "--", "sh", "-c",
                        "trap '' TERM; echo $$; while :; do sleep 0.02; done"}));
  const pid_t group = std::stoi(run.read_line());
  run.kill9();
  const auto killed_at = std::chrono::steady_clock::now();
  wait_until([&] { return group_gone(group); }, 10s, "the command's group to end");
  const auto pttl = std::stoll(redis_command(shared_server_port(), {"PTTL", lease_key(resource)}));
  EXPECT_GT(pttl, 0) << "the group outlived the lease";
  EXPECT_GE(std::chrono::steady_clock::now() - killed_at, 900ms) << "no grace was given";
}

TEST(Cli, LostRenewalStopsASlowCleanupBeforeTheNextHolderStarts) {
  // Cut off from Redis, redis-lock cannot renew. The command (whose SIGTERM handler needs
  // 3 s, more than the 2 s grace) gets SIGTERM and then SIGKILL early enough that its whole
  // group is gone when the next holder takes the expired lock.
  const auto resource = unique_resource();
  const auto events = unique_resource("events");
  TcpProxy proxy(shared_server_port());
  ChildProcess run(
      {REDIS_LOCK_CLI_PATH, "--url", "redis://127.0.0.1:" + std::to_string(proxy.port()), "--ttl",
       "8s", "--kill-after", "2s", resource, "--", "sh", "-c",
       "trap '" + mark(events, "term") + "; sleep 3; " + mark(events, "cleaned") +
           "; exit 0' TERM; echo $$; while :; do sleep 0.02; done"},
      {.stderr_too = true});
  const pid_t group = std::stoi(run.read_line());
  proxy.set_blackhole(true);
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  bool acquired = false, gone_when_acquired = false;
  locks.async_acquire(resource, {.ttl = 5s, .wait = 30s},
                      [&](boost::system::error_code ec, LockGuard g) {
                        EXPECT_FALSE(ec) << ec.message();
                        gone_when_acquired = group_gone(group);
                        acquired = g.owns_lock();
                        redis_command(shared_server_port(), {"RPUSH", events, "next-holder"});
                      });
  io.run_for(35s);
  proxy.set_blackhole(false);
  const auto output = run.read_all();
  EXPECT_EQ(run.wait(), 4) << output;
  EXPECT_TRUE(acquired);
  EXPECT_TRUE(gone_when_acquired) << "the next holder started while the command still ran";
  EXPECT_EQ(marks(events), (std::vector<std::string>{"term", "next-holder"}));
  EXPECT_NE(output.find("not confirmed"), std::string::npos) << output;
}

TEST(Cli, NoSocketOrPipeOfRedisLockLeaksIntoTheCommand) {
  // `ls` lists the shell's descriptors from outside it (a listing from within would see
  // its own directory handle and command-substitution pipes).
  ChildProcess run(cli({unique_resource(), "--", "sh", "-c", "ls -l /proc/$$/fd"}));
  const auto listing = run.read_all();
  EXPECT_EQ(run.wait(), 0);
  std::istringstream in(listing);
  int count = 0;
  for (std::string line; std::getline(in, line);) {
    const auto arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    ++count;
    const auto before = line.substr(0, arrow);
    const int fd = std::stoi(before.substr(before.rfind(' ') + 1));
    const auto target = line.substr(arrow + 4);
    if (fd <= 2) continue;
    EXPECT_EQ(target.rfind("socket:", 0), std::string::npos) << "leaked: " << line;
    EXPECT_EQ(target.rfind("pipe:", 0), std::string::npos) << "leaked: " << line;
  }
  EXPECT_GE(count, 3) << listing;
}

TEST(Cli, ThePasswordIsNeitherInPsNorInTheCommandsEnvironment) {
  const std::string secret = "s3cr3t-pw";
  RedisServer server({"--requirepass", secret});
  const std::string plain_url = "redis://127.0.0.1:" + std::to_string(server.port());
  ScratchDir dir;
  std::ofstream(dir.file("pw")) << secret << "\n";
  const std::string show = "echo ready; sleep 0.3; env";
  struct Case {
    std::vector<std::string> args;
    SpawnOptions spawn;
    bool warns;
  };
  const std::vector<Case> cases = {
      {{REDIS_LOCK_CLI_PATH, "--url", plain_url, "r", "-c", show},
       {.set_env = {"REDIS_LOCK_PASSWORD=" + secret}, .stderr_too = true},
       false},
      {{REDIS_LOCK_CLI_PATH, "--password-file", dir.file("pw"), "r", "-c", show},
       {.set_env = {"REDIS_LOCK_URL=" + plain_url}, .stderr_too = true},
       false},
      {{REDIS_LOCK_CLI_PATH,
        "--url=redis://:" + secret + "@127.0.0.1:" + std::to_string(server.port()), "r", "-c",
        show},
       {.set_env = {"REDIS_LOCK_URL=redis://:" + secret + "@127.0.0.1:1"}, .stderr_too = true},
       true},
  };
  for (const auto& c : cases) {
    ChildProcess run(c.args, c.spawn);
    std::string output;
    for (auto line = run.read_line(); line != "ready"; line = run.read_line()) {
      ASSERT_FALSE(line.empty()) << "the command did not start: " << output;
      output += line + "\n";
    }
    std::ifstream cmdline("/proc/" + std::to_string(run.pid()) + "/cmdline");
    const std::string ps((std::istreambuf_iterator<char>(cmdline)),
                         std::istreambuf_iterator<char>());
    EXPECT_FALSE(ps.empty());
    EXPECT_EQ(ps.find(secret), std::string::npos) << "visible in ps: " << ps;
    output += run.read_all();
    EXPECT_EQ(run.wait(), 0) << output;
    EXPECT_EQ(output.find(secret), std::string::npos) << output;
    EXPECT_EQ(output.find("REDIS_LOCK_URL"), std::string::npos) << output;
    EXPECT_NE(output.find("REDIS_LOCK_FENCING_TOKEN="), std::string::npos) << output;
    EXPECT_EQ(output.find("visible to other users") != std::string::npos, c.warns) << output;
  }
}

TEST(Cli, AnUnresponsiveServerAtReleaseIsReportedAndDoesNotHoldUpTheExit) {
  TcpProxy proxy(shared_server_port());
  ChildProcess run(
      {REDIS_LOCK_CLI_PATH, "--url", "redis://127.0.0.1:" + std::to_string(proxy.port()),
       unique_resource(), "--", "sh", "-c", "echo started; sleep 0.2; exit 7"},
      {.stderr_too = true});
  ASSERT_EQ(run.read_line(), "started");
  proxy.set_blackhole(true);
  const auto start = std::chrono::steady_clock::now();
  const auto output = run.read_all();
  EXPECT_EQ(run.wait(), 7) << "the command's status, whatever the release";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s + 500ms);
  EXPECT_NE(output.find("could not release"), std::string::npos) << output;
  proxy.set_blackhole(false);
}

TEST(Cli, ConflictExitCodeAndTheJsonStatusLine) {
  const auto resource = unique_resource();
  {
    Holder held(resource);
    ASSERT_TRUE(held.guard);
    ChildProcess run(cli({"-n", "-E", "75", "--json", resource, "--", "true"}),
                     {.stderr_too = true});
    const auto output = run.read_all();
    EXPECT_EQ(run.wait(), 75);
    EXPECT_NE(output.find(R"("outcome":"not_acquired","exit_code":75)"), std::string::npos)
        << output;
  }
  ChildProcess run(cli({"--json", resource, "--", "sh", "-c", "exit 3"}), {.stderr_too = true});
  const auto output = run.read_all();
  EXPECT_EQ(run.wait(), 3);
  EXPECT_NE(output.find(R"("outcome":"completed","exit_code":3)"), std::string::npos) << output;
  EXPECT_NE(output.find(R"("command_status":3,"command_signal":null,"released":true)"),
            std::string::npos)
      << output;
}

TEST(Cli, MaxHoldStopsTheCommand) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(
      ChildProcess(cli({"--max-hold", "0.3s", unique_resource(), "--", "sleep", "30"})).wait(),
      124);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
}

TEST(Cli, ShellStringsScriptsWithoutShebangAndThePrintedToken) {
  ChildProcess shell(cli({unique_resource(), "-c", "echo $((6 * 7))"}));
  EXPECT_EQ(shell.read_line(), "42");
  EXPECT_EQ(shell.wait(), 0);
  ScratchDir dir;
  std::ofstream(dir.file("job")) << "echo plain script\n";
  ::chmod(dir.file("job").c_str(), 0755);
  ChildProcess script(cli({unique_resource(), "--", dir.file("job")}));
  EXPECT_EQ(script.read_line(), "plain script");
  EXPECT_EQ(script.wait(), 0);
  ChildProcess token(cli(
      {"--print-token", unique_resource(), "--", "sh", "-c", "echo $REDIS_LOCK_FENCING_TOKEN"}));
  const auto printed = token.read_line();
  EXPECT_FALSE(printed.empty());
  EXPECT_EQ(token.read_line(), printed);
  EXPECT_EQ(token.wait(), 0);
  ChildProcess version({REDIS_LOCK_CLI_PATH, "--version"});
  EXPECT_EQ(version.read_line().rfind("redis-lock ", 0), 0u);
  EXPECT_EQ(version.wait(), 0);
}

TEST(Cli, BadValuesExitTwoBeforeAnythingIsSent) {
  // Nothing listens at `nowhere`: 2 rather than 3 shows no connection was tried.
  const std::string nowhere = "redis://127.0.0.1:" + std::to_string(free_port());
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--ttl", "1ms"},
                                             {"--ttl", "100000h"},
                                             {"-w", "-1s"},
                                             {"-E", "300"},
                                             {"--kill-after", "1x"},
                                             {"--password-file", "/no/such/file"}}) {
    std::vector<std::string> args{REDIS_LOCK_CLI_PATH, "--url", nowhere};
    args.insert(args.end(), bad.begin(), bad.end());
    args.insert(args.end(), {unique_resource(), "--", "true"});
    ChildProcess run(args, {.stderr_too = true});
    const auto output = run.read_all();
    EXPECT_EQ(run.wait(), 2) << bad.front() << ": " << output;
    EXPECT_EQ(output.rfind("redis-lock: ", 0), 0u) << output;
  }
}

TEST(Cli, ADatabaseTheServerDoesNotHaveIsAUsageError) {
  ChildProcess run({REDIS_LOCK_CLI_PATH, "--url", url() + "/99", unique_resource(), "--", "true"},
                   {.stderr_too = true});
  const auto output = run.read_all();
  EXPECT_EQ(run.wait(), 2);
  EXPECT_NE(output.find("database 99 does not exist on 127.0.0.1:"), std::string::npos) << output;
}

TEST(Cli, ConnectionErrorsNameTheServerAndTheReason) {
  const auto port = std::to_string(free_port());
  ChildProcess refused(
      {REDIS_LOCK_CLI_PATH, "--url", "redis://127.0.0.1:" + port, "r", "--", "true"},
      {.stderr_too = true});
  const auto refused_text = refused.read_all();
  EXPECT_EQ(refused.wait(), 3);
  EXPECT_NE(refused_text.find("could not connect to 127.0.0.1:" + port + ": Connection refused"),
            std::string::npos)
      << refused_text;
  ChildProcess plain(
      {REDIS_LOCK_CLI_PATH, "--url", "rediss://127.0.0.1:" + std::to_string(shared_server_port()),
       "r", "--", "true"},
      {.stderr_too = true});
  const auto plain_text = plain.read_all();
  EXPECT_EQ(plain.wait(), 3);
  EXPECT_NE(plain_text.find("did not answer the TLS handshake: if this port speaks plain text, "
                            "use redis://"),
            std::string::npos)
      << plain_text;
}

TEST(Cli, AnOldServerIsNamedWithTheVersionFoundAndNeeded) {
  // A server whose HELLO says 6.2.14 (the proxy rewrites the real one's): redis-lock says
  // which version it found and which it needs, and runs nothing.
  TcpProxy proxy(shared_server_port());
  proxy.rewrite_server_version("6.2.14");
  ChildProcess old(
      {REDIS_LOCK_CLI_PATH, "--url", "redis://127.0.0.1:" + std::to_string(proxy.port()),
       unique_resource(), "--", "echo", "ran"},
      {.stderr_too = true});
  const auto text = old.read_all();
  EXPECT_EQ(old.wait(), 3) << text;
  EXPECT_NE(text.find("version 7.0 or later (Redis >= 7.0, Valkey): this one is "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" 6.2.14 (127.0.0.1:" + std::to_string(proxy.port()) + ")"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("ran\n"), std::string::npos) << text;
}

TEST(Cli, AnEvictingServerIsRefusedUnlessAcceptedAndThenSaidOnce) {
  // A server of its own, set to evict keys: refused (exit 3) with the policy found and the
  // option that accepts it, and the command does not run; with --accept-evicting-server the
  // command runs under the lock, and stderr says once what the server does.
  RedisServer server;
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "100mb"}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}), "OK");
  const std::string at = "127.0.0.1:" + std::to_string(server.port());
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {REDIS_LOCK_CLI_PATH, "--url", "redis://" + at});
    ChildProcess p(args, {.stderr_too = true});
    auto text = p.read_all();
    return std::pair{p.wait(), std::move(text)};
  };
  const auto [refused, refused_text] = run({unique_resource(), "--", "echo", "ran"});
  EXPECT_EQ(refused, 3) << refused_text;
  EXPECT_NE(refused_text.find("the lock server evicts keys (maxmemory-policy allkeys-lru, "
                              "maxmemory 104857600): a lease could vanish while held; set "
                              "maxmemory-policy noeviction, or --accept-evicting-server (" +
                              at + ")"),
            std::string::npos)
      << refused_text;
  EXPECT_EQ(refused_text.find("ran\n"), std::string::npos) << refused_text;
  EXPECT_EQ(server.command({"DBSIZE"}), "0");
  const auto [status, status_text] = run({"status", unique_resource()});
  EXPECT_EQ(status, 3) << "every mode checks: " << status_text;

  const auto [accepted, accepted_text] =
      run({"--accept-evicting-server", unique_resource(), "--", "echo", "ran"});
  EXPECT_EQ(accepted, 0) << accepted_text;
  EXPECT_NE(accepted_text.find("ran\n"), std::string::npos) << accepted_text;
  const std::string warning = "redis-lock: warning: " + at +
                              ": the lock server evicts keys (maxmemory-policy allkeys-lru, "
                              "maxmemory 104857600): a lease could vanish while held (accepted: "
                              "--accept-evicting-server)\n";
  const auto first = accepted_text.find(warning);
  EXPECT_NE(first, std::string::npos) << accepted_text;
  EXPECT_EQ(accepted_text.find(warning, first + 1), std::string::npos)
      << "said more than once: " << accepted_text;
}

TEST(Cli, ATlsFailureIsDiagnosedWithoutSendingPlainText) {
  // A listener that answers nothing and keeps every byte it is sent (a plain-text Redis
  // answers a TLS hello with nothing too). The diagnosis used to follow the failed handshake
  // with a plain-text PING; now everything sent is TLS.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len), 0);
  std::vector<std::string> received;  // per connection
  std::atomic<bool> stop{false};
  std::thread recorder([&] {
    std::vector<pollfd> fds{{listener, POLLIN, 0}};
    while (!stop) {
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        if (i == 0) {
          const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
          if (c >= 0) {
            fds.push_back({c, POLLIN, 0});
            received.emplace_back();
          }
          continue;
        }
        char buf[4096];
        const auto n = ::read(fds[i].fd, buf, sizeof buf);
        if (n > 0) received[i - 1].append(buf, static_cast<std::size_t>(n));
        if (n <= 0) fds[i].events = 0;
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) ::close(fds[i].fd);
  });
  ChildProcess run({REDIS_LOCK_CLI_PATH, "--url",
                    "rediss://127.0.0.1:" + std::to_string(ntohs(at.sin_port)), "r", "--", "true"},
                   {.stderr_too = true});
  const auto text = run.read_all();
  EXPECT_EQ(run.wait(), 3);
  stop = true;
  recorder.join();
  ::close(listener);
  EXPECT_NE(text.find("did not answer the TLS handshake"), std::string::npos) << text;
  ASSERT_FALSE(received.empty());
  for (const auto& bytes : received) {
    EXPECT_EQ(bytes.find("PING"), std::string::npos) << "plain text was sent to a TLS URL";
    if (!bytes.empty()) {
      EXPECT_EQ(bytes[0], '\x16') << "not a TLS handshake record";
    }
  }
}

TEST(Cli, AnIgnoredHangupStaysIgnoredForTheCommand) {
  // Under nohup (SIGHUP ignored when redis-lock starts) a hangup ends neither redis-lock
  // nor the command: the signal is neither caught nor passed on.
  ChildProcess run({"/bin/sh", "-c", "trap '' HUP; exec \"$0\" \"$@\"", REDIS_LOCK_CLI_PATH,
                    "--url", url(), unique_resource(), "--", "sh", "-c",
                    "echo $$; sleep 0.5; echo survived"});
  const pid_t group = std::stoi(run.read_line());
  ::kill(run.pid(), SIGHUP);
  ::kill(-group, SIGHUP);
  EXPECT_EQ(run.read_line(), "survived");
  EXPECT_EQ(run.wait(), 0);
}

TEST(Cli, AStoppedRedisLockCannotLetTheCommandOutliveTheLease) {
  // SIGSTOP of redis-lock: nothing renews, and redis-lock cannot act. Its watcher stops
  // the group on the lease's schedule: when the group is gone the lease still has time.
  const auto resource = unique_resource();
  ChildProcess run(
      cli({"--ttl", "3s", resource, "--", "sh", "-c", "echo $$; while :; do sleep 0.02; done"}));
  const pid_t group = std::stoi(run.read_line());
  ::kill(run.pid(), SIGSTOP);
  wait_until([&] { return group_gone(group); }, 10s, "the command's group to end");
  const auto pttl = std::stoll(redis_command(shared_server_port(), {"PTTL", lease_key(resource)}));
  EXPECT_GT(pttl, 0) << "the group outlived the lease";
  ::kill(run.pid(), SIGCONT);
  const int status = run.wait();
  EXPECT_TRUE(status == 4 || status == 128 + SIGTERM) << status;
}

namespace {

/// The label a redis-lock process stores with its leases: HOSTNAME:PID.
std::string label_of(pid_t pid) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(pid);
}

/// A redis-lock subcommand's exit status and its stdout.
std::pair<int, std::string> run_cli(std::vector<std::string> args) {
  ChildProcess child(cli(std::move(args)));
  auto out = child.read_all();
  return {child.wait(), std::move(out)};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(CliAdmin, StatusShowsWhoHoldsItForHowLongInTextAndJson) {
  const auto resource = unique_resource();
  auto [free_code, free_json] = run_cli({"status", resource, "--json"});
  EXPECT_EQ(free_code, 0);
  EXPECT_EQ(free_json, "{\"resource\":\"" + resource +
                           "\",\"held\":false,\"kind\":\"none\",\"holder\":\"\",\"ttl_left_ms\":0,"
                           "\"fencing_token\":0,\"waiters\":0,\"holders\":0,\"limit\":0,"
                           "\"exclusive\":false}\n");

  ChildProcess holder(cli({"--ttl", "5s", resource, "--", "sh", "-c",
                           "echo $REDIS_LOCK_FENCING_TOKEN; exec sleep 30"}));
  const auto token = holder.read_line();
  ASSERT_FALSE(token.empty());
  auto [code, json] = run_cli({"status", resource, "--json"});
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(contains(
      json, "\"held\":true,\"kind\":\"mutex\",\"holder\":\"" + label_of(holder.pid()) + "\""))
      << json;
  EXPECT_TRUE(contains(json, "\"fencing_token\":" + token + ",")) << json;
  EXPECT_TRUE(contains(json, "\"waiters\":0,\"holders\":1,")) << json;
  const auto ttl_at = json.find("\"ttl_left_ms\":");
  ASSERT_NE(ttl_at, std::string::npos);
  const long ttl_left = std::stol(json.substr(ttl_at + 14));
  EXPECT_GT(ttl_left, 0);
  EXPECT_LE(ttl_left, 5000);

  auto [text_code, text] = run_cli({"status", resource});
  EXPECT_EQ(text_code, 0);
  EXPECT_TRUE(contains(text, "held:          yes\nkind:          mutex\nholder:        " +
                                 label_of(holder.pid()) + "\nfencing token: " + token + "\n"))
      << text;
  holder.signal(SIGTERM);
  EXPECT_EQ(holder.wait(), 128 + SIGTERM);

  // A semaphore's holds: their count and the limit.
  ChildProcess permit(
      cli({"--permits", "3", resource + "-s", "--", "sh", "-c", "echo held; exec sleep 30"}));
  ASSERT_EQ(permit.read_line(), "held");
  auto [sem_code, sem] = run_cli({"status", "--json", resource + "-s"});
  EXPECT_EQ(sem_code, 0);
  EXPECT_TRUE(contains(sem, "\"held\":true,\"kind\":\"semaphore\"")) << sem;
  EXPECT_TRUE(contains(sem, "\"holders\":1,\"limit\":3,")) << sem;
  permit.signal(SIGTERM);
  EXPECT_EQ(permit.wait(), 128 + SIGTERM);

  // Nothing listens: exit 3, nothing on stdout.
  ChildProcess nowhere({REDIS_LOCK_CLI_PATH, "--url",
                        "redis://127.0.0.1:" + std::to_string(free_port()), "status", resource});
  EXPECT_EQ(nowhere.read_all(), "");
  EXPECT_EQ(nowhere.wait(), 3);
}

TEST(CliAdmin, StatusEscapesControlCharactersFromTheServer) {
  // A lock user rewrote the holder's record with terminal escapes (a window title, colours)
  // and a C1 CSI: status shows them escaped, in text and in JSON, never as raw bytes.
  const auto resource = unique_resource();
  ChildProcess holder(cli({"--ttl", "5s", resource, "--", "sh", "-c", "echo held; exec sleep 30"}));
  ASSERT_EQ(holder.read_line(), "held");
  // The record is folded into the lease: '<token> <label>@<fencing token>'.
  const auto lease = lease_key(resource);
  const auto record = redis_command(shared_server_port(), {"GET", lease});
  const auto space = record.find(' ');
  const auto at = record.rfind('@');
  ASSERT_EQ(space, 32u) << record;
  ASSERT_NE(at, std::string::npos) << record;
  const std::string evil =
      "\x1b]0;pwned\x07\x1b[31mFAKE\xc2\x9b"
      "2J";
  ASSERT_EQ(redis_command(
                shared_server_port(),
                {"SET", lease, record.substr(0, space + 1) + evil + record.substr(at), "KEEPTTL"}),
            "OK");
  auto [code, text] = run_cli({"status", resource});
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(contains(text, "holder:        \\x1b]0;pwned\\x07\\x1b[31mFAKE\\u009b2J\n")) << text;
  auto [json_code, json] = run_cli({"status", "--json", resource});
  EXPECT_EQ(json_code, 0);
  EXPECT_TRUE(contains(json, "\"holder\":\"\\u001b]0;pwned\\u0007\\u001b[31mFAKE\\u009b2J\""))
      << json;
  for (const auto& out : {text, json}) {
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << "a raw ESC reached the terminal";
    EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << "a raw CSI reached the terminal";
  }
}

TEST(Cli, WarnsOfTlsVerifyOffAndOfAPasswordFileOthersCanRead) {
  ScratchDir dir;
  {
    std::ofstream(dir.file("open")) << "secret\n";
    std::filesystem::permissions(dir.file("open"), std::filesystem::perms(0644));
    std::ofstream(dir.file("closed")) << "secret\n";
    std::filesystem::permissions(dir.file("closed"), std::filesystem::perms(0600));
  }
  const auto warned = [](std::vector<std::string> args, const std::string& warning) {
    args.insert(args.begin(), REDIS_LOCK_CLI_PATH);
    ChildProcess run(args, {.stderr_too = true});
    const auto out = run.read_all();
    run.wait();
    return contains(out, warning);
  };
  const std::string open_warning = "can be read by other users (chmod 600 it)";
  EXPECT_TRUE(
      warned({"--url", url(), "--password-file", dir.file("open"), "status", "r"}, open_warning));
  EXPECT_FALSE(
      warned({"--url", url(), "--password-file", dir.file("closed"), "status", "r"}, open_warning));
  const std::string tls_warning = "tls_verify=false: the server's certificate is not checked";
  const auto tls_url = "rediss://127.0.0.1:" + std::to_string(free_port());
  EXPECT_TRUE(warned({"--url", tls_url + "?tls_verify=false", "status", "r"}, tls_warning));
  EXPECT_FALSE(warned({"--url", tls_url, "status", "r"}, tls_warning));
}

TEST(CliAdmin, ForceReleaseStopsTheHoldersCommandAndTheNextTokenIsLarger) {
  const auto resource = unique_resource();
  ChildProcess holder(cli({"--ttl", "3s", "--kill-after", "200ms", resource, "--", "sh", "-c",
                           "echo $REDIS_LOCK_FENCING_TOKEN; exec sleep 30"}));
  const auto evicted = std::stoull(holder.read_line());
  auto [code, out] = run_cli({"force-release", resource});
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, resource + ": released\n");
  const auto released_at = std::chrono::steady_clock::now();
  // Its next renewal (every second) learns of the loss: SIGTERM to the command, exit 4.
  EXPECT_EQ(holder.wait(), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - released_at, 2500ms);
  auto [again, again_out] = run_cli({"force-release", "--json", resource});
  EXPECT_EQ(again, 1) << "nobody held it";
  EXPECT_EQ(again_out, "{\"resource\":\"" + resource + "\",\"released\":false}\n");
  ChildProcess next(cli({resource, "--", "sh", "-c", "echo $REDIS_LOCK_FENCING_TOKEN"}));
  EXPECT_GT(std::stoull(next.read_line()), evicted);
  EXPECT_EQ(next.wait(), 0);
}

TEST(CliAdmin, ElectRunsTheCommandOnlyWhileLeadingAndObserveSeesEachLeader) {
  const auto name = unique_resource();
  const auto list = name + ":marks";
  ChildProcess observer(cli({"observe", "--json", name}));
  EXPECT_EQ(observer.read_line(),
            "{\"election\":\"" + name + "\",\"leader\":false,\"term\":null,\"value\":null}");
  // Two candidates: the second leads only after the first's command has ended.
  const std::string job =
      mark(list, "start:$REDIS_LOCK_FENCING_TOKEN") + "; echo leading; exec sleep 30";
  ChildProcess first(cli({"elect", name, "--value", "first", "-c", job}));
  ASSERT_EQ(first.read_line(), "leading");
  const auto led = observer.read_line();
  EXPECT_TRUE(contains(led, "\"leader\":true,")) << led;
  EXPECT_TRUE(contains(led, "\"value\":\"first\"}")) << led;
  ChildProcess second(cli({"elect", name, "--value", "second", "--", "sh", "-c", job}));
  const auto queue = detail::make_keys("lock:", "election:" + name).queue();
  ASSERT_TRUE(wait_until_exists(queue, true)) << "the second candidate did not queue";
  EXPECT_EQ(marks(list).size(), 1u) << "the second candidate ran without leading";
  first.signal(SIGTERM);  // passed on: its command ends, and it resigns
  EXPECT_EQ(first.wait(), 128 + SIGTERM);
  ASSERT_EQ(second.read_line(), "leading");
  const auto next = observer.read_line();
  EXPECT_TRUE(contains(next, "\"value\":\"second\"}")) << next;
  second.signal(SIGTERM);
  EXPECT_EQ(second.wait(), 128 + SIGTERM);
  const auto resigned = observer.read_line();
  EXPECT_TRUE(contains(resigned, "\"leader\":false,"))
      << "the resignation: " << resigned << " after " << next << " after " << led;
  observer.signal(SIGTERM);
  EXPECT_EQ(observer.wait(), 0);

  const auto seen = marks(list);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].rfind("start:", 0), 0u);
  EXPECT_EQ(seen[1].rfind("start:", 0), 0u);
  EXPECT_LT(std::stoull(seen[0].substr(6)), std::stoull(seen[1].substr(6))) << "terms increase";
  EXPECT_TRUE(contains(led, "\"term\":" + seen[0].substr(6) + ",")) << "the term is the token";
  EXPECT_TRUE(contains(next, "\"term\":" + seen[1].substr(6) + ","))
      << "the second leader's token is the term observed: " << next;
}

TEST(CliAdmin, ElectStopsTheCommandWhenTheLeadershipIsLost) {
  const auto name = unique_resource();
  ChildProcess leader(cli({"--ttl", "3s", "--kill-after", "200ms", "elect", name, "--", "sh", "-c",
                           "echo leading; exec sleep 30"}));
  ASSERT_EQ(leader.read_line(), "leading");
  auto [code, out] = run_cli({"force-release", "election:" + name});
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(leader.wait(), 4);
  // Options that make no sense for an election are refused before anything is sent.
  for (const char* refused : {"--no-renew", "--shared"}) {
    EXPECT_EQ(ChildProcess(cli({refused, "elect", name, "--", "true"})).wait(), 2) << refused;
  }
  ChildProcess unreachable({REDIS_LOCK_CLI_PATH, "--url",
                            "redis://127.0.0.1:" + std::to_string(free_port()), "observe", name});
  EXPECT_EQ(unreachable.read_all(), "");
  EXPECT_EQ(unreachable.wait(), 3);
}

// SPDX-License-Identifier: MIT
// The nemesis suite (issue 51): worker processes on the public API (nemesis_worker.cpp), each
// behind a TCP proxy of its own, take one lock in turn and write their fencing tokens to a
// fenced register on an independent server, while a schedule of real faults runs: a worker's
// path frozen, every path slowed, a worker paused (SIGSTOP), the lock server killed with
// SIGKILL and restarted without persistence, FLUSHALL, its wall clock stepped forward and
// back (the clock shim). Then a checker reads the merged history (history.cpp) and holds it
// to docs/safety.md. Longer on demand: REDIS_LOCK_NEMESIS_SECONDS (the schedule repeats).
#include "history.hpp"

#include "child_process.hpp"
#include "clock_file.hpp"
#include "keys.hpp"
#include "redis_cluster.hpp"
#include "redis_sentinel.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include "redis_lock_scripts.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace redis_lock::nemesis {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::RedisServer;
using test::TcpProxy;

constexpr int workers = 4;
constexpr auto ttl = 1000ms;

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}

/// The workers of one run and the faults made while they ran: their histories.
struct Workers {
  std::unique_ptr<RedisServer> register_server = std::make_unique<RedisServer>();
  std::vector<std::unique_ptr<ChildProcess>> children;
  std::vector<std::string> files;
  std::vector<Fault> faults;

  /// One worker per URL (its way to the lock server), for `seconds`.
  void start(const std::vector<std::string>& urls, int seconds, const std::string& tag) {
    for (std::size_t i = 0; i < urls.size(); ++i) {
      // (The process id in the name: runs of other builds may share the directory.)
      files.push_back(::testing::TempDir() + "nemesis-" + tag + "-" + std::to_string(::getpid()) +
                      "-" + std::to_string(i) + ".log");
      children.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          REDIS_LOCK_NEMESIS_WORKER, urls[i], std::to_string(register_server->port()), "nemesis",
          std::to_string(ttl.count()), std::to_string(seconds), files.back()}));
    }
  }

  /// A fault from now for `length`, then healed by `heal` (recorded with both times).
  template <class Make, class Heal>
  void fault(FaultKind kind, int target, std::chrono::milliseconds length, Make make, Heal heal) {
    Fault f{kind, target, now_ns(), 0};
    make();
    std::this_thread::sleep_for(length);
    heal();
    f.healed = now_ns();
    faults.push_back(f);
  }

  /// Waits for every worker's last line ('done'), `limit` at most; a worker still running
  /// then is killed and named as hung.
  std::vector<std::string> finish(std::chrono::seconds limit) {
    std::vector<std::string> hung;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (std::size_t i = 0; i < children.size(); ++i) {
      while (read_file(files[i]).find(" done\n") == std::string::npos &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(50ms);
      }
      if (read_file(files[i]).find(" done\n") == std::string::npos) {
        hung.push_back("worker " + std::to_string(i));
        children[i]->kill9();
      } else {
        children[i]->wait();
      }
    }
    return hung;
  }

  static std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  /// The worker that holds the lock now, as its history says (granted, not yet released),
  /// or `otherwise`: a fault aimed at a holder.
  int holder(int otherwise) const {
    for (std::size_t i = 0; i < files.size(); ++i) {
      const auto text = read_file(files[i]);
      const auto granted = text.rfind(" acquire ok ");
      if (granted != std::string::npos &&
          text.find(" release invoke ", granted) == std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return otherwise;
  }

  /// A worker that waits for the lock now (its last line an acquire sent), or `otherwise`.
  int waiter(int otherwise) const {
    for (std::size_t i = 0; i < files.size(); ++i) {
      const auto text = read_file(files[i]);
      const auto last = text.rfind('\n', text.size() >= 2 ? text.size() - 2 : 0);
      if (text.find(" acquire invoke", last == std::string::npos ? 0 : last) != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return otherwise;
  }

  /// The histories stay for a failed test to be read (also one a helper's exception ends):
  /// only a run that passed its checks removes them (remove()).
  void remove() const {
    for (const auto& f : files) std::remove(f.c_str());
  }
  Workers() = default;
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  std::vector<std::string> histories() const {
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back(read_file(f));
    return out;
  }
};

/// The workers end within `limit`, and their history keeps every promise (the table printed).
void expect_every_promise(Workers& w, std::chrono::seconds limit) {
  const auto hung = w.finish(limit);
  EXPECT_TRUE(hung.empty()) << "hung: " << hung.front();
  const auto report = check(w.histories(), w.faults, ttl);
  std::cout << report.table();
  EXPECT_GT(report.acquisitions, 40) << "the workers hardly ran";
  EXPECT_TRUE(report.violations.empty()) << report.violations.front();
  if (::testing::Test::HasFailure()) {
    std::cout << "[nemesis] the histories:";
    for (const auto& f : w.files) std::cout << " " << f;
    std::cout << "\n";
  } else {
    w.remove();
  }
}

/// A standalone lock server (its clock stepped by the shim) and a proxy per worker.
struct Standalone {
  test::ClockFile clock;
  std::unique_ptr<RedisServer> server;
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  Workers w;

  Standalone() {
    clock.with_shim(REDIS_LOCK_CLOCK_SHIM, [&] { server = std::make_unique<RedisServer>(); });
  }

  void start(int seconds, const std::string& tag) {
    std::vector<std::string> urls;
    for (int i = 0; i < workers; ++i) {
      proxies.push_back(std::make_unique<TcpProxy>(server->port()));
      urls.push_back("redis://127.0.0.1:" + std::to_string(proxies.back()->port()));
    }
    w.start(urls, seconds, tag);
  }

  /// Worker `i` stopped (SIGSTOP) for 1.5 s.
  void pause(FaultKind kind, int i) {
    w.fault(
        kind, i, 1500ms, [&] { w.children[i]->signal(SIGSTOP); },
        [&] { w.children[i]->signal(SIGCONT); });
  }

  void step_clock(std::int64_t ms) {
    if (clock.cell() != nullptr) clock.cell()->fetch_add(ms);
  }

  /// The schedule, once (about 22 s), each fault healed before the next, with a quiet
  /// second and a half after each.
  void schedule() {
    const auto quiet = [] { std::this_thread::sleep_for(1500ms); };
    quiet();
    const int cut = w.holder(0);
    w.fault(
        FaultKind::partition, cut, 1500ms, [&] { proxies[cut]->set_blackhole(true); },
        [&] { proxies[cut]->set_blackhole(false); });
    quiet();
    w.fault(
        FaultKind::delay, -1, 2000ms,
        [&] {
          for (auto& p : proxies) p->set_delay(150ms);
        },
        [&] {
          for (auto& p : proxies) p->set_delay(0ms);
        });
    quiet();
    pause(FaultKind::pause, w.holder(1));
    quiet();
    const int reset = w.holder(2);
    w.fault(
        FaultKind::reset, reset, 0ms, [&] { proxies[reset]->reset_connections(); }, [] {});
    quiet();
    pause(FaultKind::pause_waiter, w.waiter(3));
    quiet();
    w.fault(
        FaultKind::restart, -1, 300ms, [&] { server->kill(SIGKILL); },
        [&] { clock.with_shim(REDIS_LOCK_CLOCK_SHIM, [&] { server->restart(); }); });
    quiet();
    w.fault(
        FaultKind::flushall, -1, 0ms, [&] { server->command({"FLUSHALL"}); }, [] {});
    quiet();
    w.fault(
        FaultKind::clock_forward, -1, 0ms, [&] { step_clock(2000); }, [] {});
    quiet();
    w.fault(
        FaultKind::clock_back, -1, 0ms, [&] { step_clock(-2000); }, [] {});
    quiet();
  }
};

TEST(Nemesis, ClusterKeepsEveryPromiseThroughAFailoverAMigrationAndAKilledMaster) {
  test::RedisCluster cluster(3, 1);  // 3 masters: a majority left to promote a replica
  const auto cfg = cluster.config();
  std::string url = "redis+cluster://";
  for (std::size_t i = 0; i < cfg.nodes.size(); ++i) {
    url += (i ? "," : "") + cfg.nodes[i].host + ":" + std::to_string(cfg.nodes[i].port);
  }
  const auto slot = detail::key_slot("lock:{nemesis}");
  Workers w;
  w.start(std::vector<std::string>(workers, url), 30, "cluster");
  const auto quiet = [] { std::this_thread::sleep_for(2s); };
  quiet();
  w.fault(
      FaultKind::failover, -1, 0ms,
      [&] { cluster.failover(cluster.replica_of(cluster.master_of(slot))); }, [] {});
  quiet();
  w.fault(
      FaultKind::migration, -1, 0ms,
      [&] {
        const auto from = cluster.master_of(slot);
        std::size_t to = from;
        for (std::size_t i = 0; i < cluster.size(); ++i) {
          if (i != from && cluster.is_master(i)) to = i;
        }
        cluster.move_slot(slot, to, [] {});
      },
      [] {});
  quiet();
  const auto killed = cluster.master_of(slot);
  w.fault(
      FaultKind::master_killed, -1, 0ms, [&] { cluster.node(killed).kill(SIGKILL); },
      [&] {
        test::wait_until(
            [&] {
              try {
                return cluster.master_of(slot) != killed;
              } catch (const std::exception&) {
                return false;  // nobody claims the slot yet
              }
            },
            20s, "the replica's promotion");
      });
  cluster.node(killed).restart();  // back as a replica
  cluster.wait_healthy();
  quiet();
  expect_every_promise(w, 90s);
}

TEST(Nemesis, SentinelKeepsEveryPromiseThroughFailovers) {
  test::RedisSentinelSet set;
  Workers w;
  w.start(std::vector<std::string>(workers, set.url()), 36, "sentinel");
  const auto quiet = [] { std::this_thread::sleep_for(2s); };
  quiet();
  const auto first = set.master();
  // Healed when the old master says it is a replica: a sentinel reconfigures it when it next
  // looks at it (up to ~10 s), and until then it accepts writes too (the checker's window).
  w.fault(
      FaultKind::sentinel_failover, -1, 0ms, [&] { set.failover(); },
      [&] {
        test::wait_until([&] { return set.data(first).command({"ROLE"}).rfind("slave", 0) == 0; },
                         20s, "the old master's demotion");
      });
  quiet();
  const auto killed = set.master();
  w.fault(
      FaultKind::sentinel_master_killed, -1, 0ms, [&] { set.data(killed).kill(SIGKILL); },
      [&] { set.wait_new_master(killed); });
  set.data(killed).restart();  // the sentinels make it a replica
  quiet();
  expect_every_promise(w, 90s);
}

/// The functions library with a planted bug: the mint without its clock floor (a lost
/// counter starts again from 1), as fencing tokens were minted before they were floored.
std::string library_without_clock_floor() {
  std::string text(detail::function_library);
  for (const char* from :
       {"if not fresh_only and minted ~= fence then", "if not fresh_only or f == 1 then"}) {
    const auto at = text.find(from);
    if (at == std::string::npos) return {};
    text.replace(at, std::string_view(from).size(), "if false then");
  }
  return text;
}

TEST(Nemesis, StandaloneKeepsEveryPromiseThroughItsFaults) {
  const int rounds =
      std::max(1, static_cast<int>(env_number("REDIS_LOCK_NEMESIS_SECONDS", 0) / 22));
  Standalone run;
  const int seconds = rounds * 22 + 2;
  run.start(seconds, "standalone");
  for (int i = 0; i < rounds; ++i) run.schedule();
  expect_every_promise(run.w, std::chrono::seconds(seconds + 30));
}

TEST(Nemesis, FindsThePlantedMintWithoutItsClockFloor) {
  // The server runs a functions library whose mint is a bare INCR (the library finds it
  // loaded under its own name and calls it): a FLUSHALL then restarts the tokens from 1.
  const auto planted = library_without_clock_floor();
  ASSERT_FALSE(planted.empty()) << "the planted bug no longer matches the mint";
  Standalone run;
  ASSERT_EQ(run.server->command({"FUNCTION", "LOAD", planted}).rfind("redis_lock_", 0), 0u);
  run.start(8, "planted");
  std::this_thread::sleep_for(3s);
  run.w.fault(
      FaultKind::flushall, -1, 0ms, [&] { run.server->command({"FLUSHALL"}); }, [] {});
  const auto hung = run.w.finish(40s);
  EXPECT_TRUE(hung.empty());
  const auto report = check(run.w.histories(), run.w.faults, ttl);
  std::cout << report.table();
  ASSERT_FALSE(report.violations.empty()) << "the planted bug was not found";
  std::cout << "[nemesis] planted mint without its clock floor found: " << report.violations.front()
            << "\n";
  EXPECT_NE(report.violations.front().find("TOKEN_ORDER"), std::string::npos)
      << report.violations.front();
  if (!::testing::Test::HasFailure()) run.w.remove();
}

// The checker, seen failing: synthetic histories (ms on the steady clock) with what it must
// catch and what it must let through.
std::string history_of(std::initializer_list<std::string> lines) {
  std::string out;
  for (const auto& l : lines) {
    const auto space = l.find(' ');
    out += std::to_string(std::stoll(l.substr(0, space)) * 1000000) + l.substr(space) + "\n";
  }
  return out + "999999000000 done\n";
}

TEST(NemesisChecker, AnOverlapWithoutAFaultIsAViolationAndAcrossARestartIsNot) {
  // Worker 0 holds from 100 to 600 ms (valid until 900); worker 1 is granted at 400.
  const auto a = history_of({"90 acquire invoke", "100 acquire ok 10 900000000", "101 write ok 10",
                             "600 release invoke 10 0 900000000", "601 release ok 1"});
  const auto b =
      history_of({"300 acquire invoke", "400 acquire ok 11 1400000000", "401 write ok 11",
                  "500 release invoke 11 0 1400000000", "501 release ok 1"});
  const auto none = check({a, b}, {}, 1000ms);
  ASSERT_EQ(none.violations.size(), 1u);
  EXPECT_EQ(none.violations.front().rfind("OVERLAP", 0), 0u) << none.violations.front();
  const auto restart =
      check({a, b}, {Fault{FaultKind::restart, -1, 200 * 1000000LL, 250 * 1000000LL}}, 1000ms);
  EXPECT_TRUE(restart.violations.empty()) << restart.violations.front();
  EXPECT_EQ(restart.rows.at(to_string(FaultKind::restart)).overlaps, 1);
  // A pause explains nothing: the paused holder's validity bounds it.
  const auto pause =
      check({a, b}, {Fault{FaultKind::pause, 0, 200 * 1000000LL, 250 * 1000000LL}}, 1000ms);
  EXPECT_EQ(pause.violations.size(), 1u);
}

TEST(NemesisChecker, AGrantReadAfterItsValidityIsNeverHeldAndItsLateWriteIsFencingAtWork) {
  // Worker 0 is granted, stopped before it reads the reply, and wakes past its validity:
  // it never believed it held the lock, and its write is refused as it should be.
  const auto a =
      history_of({"90 acquire invoke", "2000 acquire ok 10 1100000000", "2001 write refused 10",
                  "2100 release invoke 10 1 1100000000", "2101 release ok 0"});
  const auto b =
      history_of({"1200 acquire invoke", "1300 acquire ok 11 2300000000", "1301 write ok 11",
                  "2200 release invoke 11 0 2300000000", "2201 release ok 1"});
  const auto r = check({a, b}, {}, 1000ms);
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  EXPECT_EQ(r.late_writes_refused, 1);
}

/// A worker's history of one holding: asked for at `invoked` ms, granted `token` at `granted`,
/// valid until `valid` ms, released 100 ms after its grant (saying it is lost if it is).
std::string one_holding(int invoked, int granted, int token, long long valid) {
  const auto t = std::to_string(token), v = std::to_string(valid * 1000000);
  const int release = granted + 100;
  const bool lost = release > valid;
  return history_of({std::to_string(invoked) + " acquire invoke",
                     std::to_string(granted) + " acquire ok " + t + " " + v,
                     std::to_string(release) + " release invoke " + t + (lost ? " 1 " : " 0 ") + v,
                     std::to_string(release + 1) + " release ok " + (lost ? "0" : "1")});
}

TEST(NemesisChecker, ATokenBelowOneGrantedBeforeIsAViolation) {
  const auto a = one_holding(90, 100, 10, 900);
  // Asked for after a's grant; or queued before it (95 < 100) and handed the lock after a's
  // release: either way its token was minted after 10.
  for (const auto& lower : {one_holding(300, 400, 9, 1400), one_holding(95, 300, 9, 1300)}) {
    const auto r = check({a, lower}, {}, 1000ms);
    ASSERT_EQ(r.violations.size(), 1u);
    EXPECT_EQ(r.violations.front().rfind("TOKEN_ORDER", 0), 0u) << r.violations.front();
  }
  // A grant read after its own validity (a worker stopped with the reply in flight) was
  // never held: its token may be the older one.
  EXPECT_TRUE(check({a, one_holding(95, 300, 9, 250)}, {}, 1000ms).violations.empty());
  EXPECT_TRUE(check({a, one_holding(95, 300, 11, 1300)}, {}, 1000ms).violations.empty());
}

TEST(NemesisChecker, AGuardPastItsValidityThatSaysItIsNotLostIsAViolation) {
  const auto a = history_of({"90 acquire invoke", "100 acquire ok 10 900000000",
                             "950 release invoke 10 0 900000000", "951 release ok 0"});
  const auto r = check({a}, {}, 1000ms);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations.front().rfind("LOST_SIGNAL", 0), 0u) << r.violations.front();
}

TEST(NemesisChecker, AnUnendedCallAndAnUnnamedErrorAreViolations) {
  const auto a = history_of({"90 acquire invoke", "100 acquire fail"});
  auto b = std::string("100000000 acquire invoke\n");  // never ends, no 'done'
  const auto r = check({a, b}, {}, 1000ms);
  ASSERT_EQ(r.violations.size(), 2u);
  EXPECT_EQ(r.violations[0].rfind("NAMED", 0), 0u) << r.violations[0];
  EXPECT_EQ(r.violations[1].rfind("HANG", 0), 0u) << r.violations[1];
}

TEST(NemesisChecker, AReleaseThatNeverEndsOrTakesTooLongIsAHang) {
  const auto slow = history_of({"90 acquire invoke", "100 acquire ok 10 900000000",
                                "200 release invoke 10 0 900000000", "20000 release ok 1"});
  const auto r = check({slow}, {}, 1000ms);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_NE(r.violations.front().find("release took"), std::string::npos) << r.violations.front();
  auto unended = std::string("90000000 acquire invoke\n100000000 acquire ok 10 900000000\n") +
                 "200000000 release invoke 10 0 900000000\n";
  const auto never = check({unended}, {}, 1000ms);
  ASSERT_EQ(never.violations.size(), 1u);
  EXPECT_NE(never.violations.front().find("last release never ended"), std::string::npos);
}

TEST(NemesisChecker, AnErrorIsNamedByItsCategoryCodeAndMessage) {
  const auto named = history_of({"90 acquire invoke", "100 acquire fail redis_lock:3 timed out",
                                 "200 acquire invoke", "300 acquire ok 10 1100000000",
                                 "400 release invoke 10 0 1100000000",
                                 "401 release fail redis_lock:7 connection lost"});
  const auto ok = check({named}, {}, 1000ms);
  EXPECT_TRUE(ok.violations.empty()) << ok.violations.front();
  EXPECT_EQ(ok.errors.at("redis_lock:3 timed out"), 1);
  EXPECT_EQ(ok.errors.at("release: redis_lock:7 connection lost"), 1);
  for (const char* bare : {"timeout", "redis_lock:x timed out", "redis_lock:3", ":3 lost"}) {
    const auto a = history_of({"90 acquire invoke", std::string("100 acquire fail ") + bare});
    const auto r = check({a}, {}, 1000ms);
    ASSERT_EQ(r.violations.size(), 1u) << bare;
    EXPECT_EQ(r.violations.front().rfind("NAMED", 0), 0u) << r.violations.front();
  }
}

}  // namespace
}  // namespace redis_lock::nemesis

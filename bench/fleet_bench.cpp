// SPDX-License-Identifier: MIT
// A fleet of many LockManagers on one Redis server: what the server and the clients pay for
// P processes of M managers each (every manager with its own connections), phase by phase.
//
// The parent starts one redis-server (the test harness's, with a high `maxclients`; or uses
// --port), raises its RLIMIT_NOFILE soft limit to the hard limit, and forks/execs P copies of
// itself in --child mode, each with a control pipe (one command byte per phase) and a result
// pipe (one line per phase). Each child raises its own limit, makes M LockManagers on one
// io_context run by one thread, says "ready" and waits. The parent starts every phase in all
// children at once and samples the server over its own hiredis connection (INFO, CLIENT LIST)
// before and after it:
//
//   1. storm       every manager acquires `fleet:<child>:<i>` (ttl 10 s, wait 30 s) and
//                  releases it: time from "go" until the last manager got its first lock,
//                  errors by code, server clients and memory, per-client `tot-mem`;
//   2. idle        S seconds of nothing: server CPU (% of a core), server commands (must be
//                  ~0: no polling; the sampler's own INFO is taken out), each child's CPU,
//                  resident memory per manager (VmRSS / M, and its growth from before the
//                  managers were made to after the storm), per-client `tot-mem` at the end;
//                  beside a raw baseline: before the phase the parent starts a second
//                  redis-server with the same options and opens on it raw idle hiredis
//                  connections (one CLIENT SETNAME rawidle each, then nothing), as many as
//                  make its connected_clients equal the fleet server's; both servers' INFO cpu
//                  is read over the same window (the raw one's right after the fleet one's at
//                  each end), giving "fleet / raw"; the raw server stops after the phase;
//   3. contention  W waiters (the first W/P managers of each child) acquire `fleet:hot`
//                  (ttl 10 s, wait 60 s) and release at once: all served?, hand-offs/s,
//                  server CPU per hand-off, max wait, and how far grant order (fencing
//                  tokens) departs from the order the acquires started (informative:
//                  inversions over the waiters after the first grant). The window includes
//                  each waiter opening its pub/sub connection;
//   4. pairs       every manager loops acquire+release on its own resource for T seconds
//                  (ttl 10 s, one attempt each: wait 0): pairs/s, server CPU %, pairs/s per
//                  server core, client CPU per pair;
//   5. restart     (unless --no-restart, and only on a server started here) the server is
//                  killed with SIGKILL, "go" is sent at once, the server is started again
//                  on the same port, empty: time until every manager holds its lock again.
//
// --cluster: the same phases on a 3-master Redis Cluster without replicas (the test harness's
// RedisCluster; the managers use its ConnectionConfig, every master a seed). Server columns are
// summed over the masters, and each phase adds a table per master (CPU % of a core over its
// own window, commands, connected_clients, used_memory) and the CPU spread (max / min - 1).
// The contention phase's hot resource lives on one master (its slot and master are printed);
// the raw baseline (one server) and the restart phase do not apply.
//
// --sizes N1,N2,...: a sweep. For each total fleet size N, P = 4 processes (or --processes) of
// M = N / P managers run the storm and the restart only, each size on fresh servers; then one
// table (storm and restart "all held after", their errors, connected_clients and used_memory
// after the storm) and JSON {"sweep": [...], "runs": [each size's full JSON]}.
//
// Steady-clock times cross the pipes as nanoseconds (CLOCK_MONOTONIC: one clock for every
// process on the machine). Every error is counted by its code, never retried here beyond what
// the library does. A child that has not answered a phase within its wait + 30 s is reported
// as hung: the parent kills the children and exits with 3. Exit code 0 only when no phase had
// an error (1 otherwise, 2 for bad arguments).
//
//   fleet_bench [--processes P] [--managers M] [--idle-seconds S] [--waiters W]
//               [--pairs-seconds T] [--restart | --no-restart] [--port PORT] [--cluster]
//               [--sizes N1,N2,...] [--json FILE] [--quick]
//   defaults: P=4 M=250 S=60 W=1000 T=10; --quick: P=2 M=100 S=10 W=100 T=3
#include "redis_cluster.hpp"
#include "redis_server.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <hiredis/hiredis.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using redis_lock::LockManager;

namespace {

// ---------------------------------------------------------------------------------------------
// Small shared helpers

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the limit now in force.
rlim_t raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    ::getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur;
}

/// VmRSS of this process, in kB (0 if unreadable).
long rss_kb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

/// User + system CPU of this process, in seconds.
double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// Percent-escapes the characters the result lines use as separators.
std::string encode(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == ' ' || c == '%' || c == '=' || c == ',' || c == '\n' || c == '\r') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string decode(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

/// Writes all of `line` to `fd` (blocking).
bool write_all(int fd, const std::string& line) {
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The phases, by their command byte.
constexpr char phase_storm = 'S', phase_idle = 'I', phase_contention = 'C', phase_pairs = 'P',
               phase_restart = 'R', phase_quit = 'Q';

// The waits of the phases' acquires; a child has that + 30 s to answer.
constexpr auto storm_wait = 30s;
constexpr auto contention_wait = 60s;
constexpr auto answer_margin = 30s;
constexpr auto lock_ttl = 10s;

// ---------------------------------------------------------------------------------------------
// The child: M managers on one io_context, one thread

/// What one phase of one child saw.
struct Tally {
  long tried = 0, ok = 0;
  long long first_ns = 0, last_ns = 0;  // first and last grant (steady clock)
  std::map<std::tuple<std::string, std::string, std::string>, long> errors;  // op, name, message
  std::vector<std::tuple<long long, long long, std::uint64_t>> waits;  // start, grant, fencing

  void granted(long long t) {
    ++ok;
    if (first_ns == 0 || t < first_ns) first_ns = t;
    if (t > last_ns) last_ns = t;
  }
  void error(const std::string& op, const boost::system::error_code& ec) {
    std::string name;
    if (ec.category() == redis_lock::error_category()) {
      name = redis_lock::error_name(static_cast<redis_lock::error>(ec.value()));
    } else {
      name = std::string(ec.category().name()) + ":" + std::to_string(ec.value());
    }
    ++errors[{op, name, ec.message()}];
  }
  void error(const std::string& op, const std::string& name, const std::string& message) {
    ++errors[{op, name, message}];
  }
  /// The tally's part of a result line.
  std::string line() const {
    std::string out = " tried=" + std::to_string(tried) + " ok=" + std::to_string(ok) +
                      " first_ns=" + std::to_string(first_ns) +
                      " last_ns=" + std::to_string(last_ns);
    for (const auto& [key, count] : errors) {
      out += " e=" + encode(std::get<0>(key)) + "," + encode(std::get<1>(key)) + "," +
             encode(std::get<2>(key)) + "," + std::to_string(count);
    }
    for (const auto& [start, grant, fencing] : waits) {
      out += " w=" + std::to_string(start) + "," + std::to_string(grant) + "," +
             std::to_string(fencing);
    }
    return out;
  }
};

/// Runs every task at once on the current executor and returns when all have finished. An
/// exception escaping a task is counted as an error of `tally`.
asio::awaitable<void> run_all(std::vector<asio::awaitable<void>> tasks, Tally& tally) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer done(ex, Clock::time_point::max());
  std::size_t left = tasks.size();
  for (auto& task : tasks) {
    asio::co_spawn(ex, std::move(task), [&](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          tally.error("exception", "exception", x.what());
        }
      }
      if (--left == 0) done.cancel();
    });
  }
  if (left > 0) co_await done.async_wait(asio::as_tuple(asio::use_awaitable));
}

/// Whether an acquire got its lock; an error or an empty guard is tallied (`why`: what
/// an empty guard means for that acquire).
bool got_lock(Tally& t, boost::system::error_code ec, const redis_lock::LockGuard& g,
              const char* why = "no lock within the wait") {
  if (ec) {
    t.error("acquire", ec);
    return false;
  }
  if (!g) {
    t.error("acquire", "not_acquired", why);
    return false;
  }
  return true;
}

/// Releases `g`; an error, or a lease no longer ours, is tallied. True when released.
asio::awaitable<bool> release_counted(redis_lock::LockGuard& g, Tally& t) {
  auto [rec, released] = co_await g.async_release(asio::as_tuple(asio::use_awaitable));
  if (rec) {
    t.error("release", rec);
  } else if (!released) {
    t.error("release", "not_held", "the lease had expired or was another's");
  }
  co_return !rec && released;
}

/// One acquire (and its release, at once): the storm's and the restart's step.
asio::awaitable<void> acquire_release(LockManager& m, std::string resource,
                                      std::chrono::milliseconds wait, Tally& t) {
  ++t.tried;
  auto [ec, g] = co_await m.async_acquire(resource, {.ttl = lock_ttl, .wait = wait},
                                          asio::as_tuple(asio::use_awaitable));
  if (!got_lock(t, ec, g)) co_return;
  t.granted(now_ns());
  co_await release_counted(g, t);
}

/// A waiter of the contention phase: its start, grant and fencing token are recorded.
asio::awaitable<void> contend(LockManager& m, Tally& t) {
  ++t.tried;
  const long long start = now_ns();
  auto [ec, g] = co_await m.async_acquire("fleet:hot", {.ttl = lock_ttl, .wait = contention_wait},
                                          asio::as_tuple(asio::use_awaitable));
  const long long grant = now_ns();
  if (!got_lock(t, ec, g)) co_return;
  t.granted(grant);
  t.waits.emplace_back(start, grant, g.fencing_token());
  co_await release_counted(g, t);
}

/// Acquire+release pairs on one resource until `until`; completed pairs are counted.
asio::awaitable<void> pair_loop(LockManager& m, std::string resource, Clock::time_point until,
                                Tally& t, long& pairs) {
  while (Clock::now() < until) {
    ++t.tried;
    auto [ec, g] =
        co_await m.async_acquire(resource, {.ttl = lock_ttl}, asio::as_tuple(asio::use_awaitable));
    if (!got_lock(t, ec, g, "held elsewhere (one attempt)")) continue;
    ++t.ok;
    if (co_await release_counted(g, t)) ++pairs;
  }
}

struct ChildArgs {
  int index = 0, managers = 0, waiters = 0, ctl_fd = -1, out_fd = -1;
  std::uint16_t port = 0;
  std::string cluster_ports;  // --cluster: the masters' ports, comma-separated (seeds)
  int idle_s = 0, pairs_s = 0;
};

class Child {
 public:
  explicit Child(const ChildArgs& a) : a_(a), io_(1) {
    rss_before_kb_ = rss_kb();
    redis_lock::ConnectionConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = a.port;
    if (!a.cluster_ports.empty()) {
      cfg.topology = redis_lock::Topology::cluster;
      for (const auto& p : split(a.cluster_ports, ',')) {
        cfg.nodes.push_back({"127.0.0.1", static_cast<std::uint16_t>(std::atoi(p.c_str()))});
      }
    }
    redis_lock::ManagerOptions opts;
    opts.client_name = "fleet_bench";
    managers_.reserve(static_cast<std::size_t>(a.managers));
    for (int i = 0; i < a.managers; ++i) {
      managers_.push_back(std::make_unique<LockManager>(io_.get_executor(), cfg, opts));
    }
  }

  int run() {
    write_all(a_.out_fd, "ready rss_before_kb=" + std::to_string(rss_before_kb_) +
                             " rss_kb=" + std::to_string(rss_kb()) + "\n");
    asio::co_spawn(io_, control(), [this](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          std::fprintf(stderr, "fleet_bench child %d: %s\n", a_.index, x.what());
        }
      }
      io_.stop();  // quit: idle connections need not be closed politely
    });
    io_.run();
    return 0;
  }

 private:
  std::string resource(int i) const {
    return "fleet:" + std::to_string(a_.index) + ":" + std::to_string(i);
  }

  asio::awaitable<void> control() {
    asio::posix::stream_descriptor ctl(io_, a_.ctl_fd);
    for (;;) {
      char cmd = 0;
      auto [ec, n] = co_await asio::async_read(ctl, asio::buffer(&cmd, 1),
                                               asio::as_tuple(asio::use_awaitable));
      if (ec || n != 1 || cmd == phase_quit) co_return;  // quit, or the parent is gone
      std::string line;
      switch (cmd) {
        case phase_storm:
        case phase_restart:
          line = co_await storm(cmd);
          break;
        case phase_idle:
          line = co_await idle();
          break;
        case phase_contention:
          line = co_await contention();
          break;
        case phase_pairs:
          line = co_await pairs();
          break;
        default:
          line = std::string(1, cmd) + " unknown=1";
      }
      if (!write_all(a_.out_fd, line + "\n")) co_return;
    }
  }

  asio::awaitable<std::string> storm(char cmd) {
    Tally t;
    const double cpu0 = process_cpu_s();
    std::vector<asio::awaitable<void>> tasks;
    for (int i = 0; i < a_.managers; ++i) {
      tasks.push_back(
          acquire_release(*managers_[static_cast<std::size_t>(i)], resource(i), storm_wait, t));
    }
    co_await run_all(std::move(tasks), t);
    const long rss = rss_kb();
    if (cmd == phase_storm) rss_storm_kb_ = rss;
    co_return std::string(1, cmd) + t.line() + " cpu_s=" + fmt("%.4f", process_cpu_s() - cpu0) +
        " rss_kb=" + std::to_string(rss) + " rss_before_kb=" + std::to_string(rss_before_kb_);
  }

  asio::awaitable<std::string> idle() {
    Tally t;
    const double cpu0 = process_cpu_s();
    const auto t0 = Clock::now();
    asio::steady_timer timer(io_, std::chrono::seconds(a_.idle_s));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    const double cpu = process_cpu_s() - cpu0;
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    co_return std::string(1, phase_idle) + t.line() + " cpu_s=" + fmt("%.4f", cpu) +
        " wall_s=" + fmt("%.3f", wall) + " rss_kb=" + std::to_string(rss_kb()) +
        " rss_before_kb=" + std::to_string(rss_before_kb_) +
        " rss_storm_kb=" + std::to_string(rss_storm_kb_);
  }

  asio::awaitable<std::string> contention() {
    Tally t;
    const double cpu0 = process_cpu_s();
    std::vector<asio::awaitable<void>> tasks;
    for (int i = 0; i < a_.waiters; ++i) {
      tasks.push_back(contend(*managers_[static_cast<std::size_t>(i)], t));
    }
    co_await run_all(std::move(tasks), t);
    co_return std::string(1, phase_contention) + t.line() +
        " cpu_s=" + fmt("%.4f", process_cpu_s() - cpu0);
  }

  asio::awaitable<std::string> pairs() {
    Tally t;
    long pairs = 0;
    const double cpu0 = process_cpu_s();
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::seconds(a_.pairs_s);
    std::vector<asio::awaitable<void>> tasks;
    for (int i = 0; i < a_.managers; ++i) {
      tasks.push_back(
          pair_loop(*managers_[static_cast<std::size_t>(i)], resource(i), until, t, pairs));
    }
    co_await run_all(std::move(tasks), t);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    co_return std::string(1, phase_pairs) + t.line() + " pairs=" + std::to_string(pairs) +
        " wall_s=" + fmt("%.4f", wall) + " cpu_s=" + fmt("%.4f", process_cpu_s() - cpu0);
  }

  ChildArgs a_;
  asio::io_context io_;
  std::vector<std::unique_ptr<LockManager>> managers_;
  long rss_before_kb_ = 0, rss_storm_kb_ = 0;
};

int child_main(int argc, char** argv) {
  ChildArgs a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--child") a.index = v;
    if (k == "--managers") a.managers = v;
    if (k == "--waiters-here") a.waiters = v;
    if (k == "--port") a.port = static_cast<std::uint16_t>(v);
    if (k == "--idle-seconds") a.idle_s = v;
    if (k == "--pairs-seconds") a.pairs_s = v;
    if (k == "--ctl-fd") a.ctl_fd = v;
    if (k == "--out-fd") a.out_fd = v;
    if (k == "--cluster-ports") a.cluster_ports = argv[i + 1];
  }
  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  Child child(a);
  return child.run();
}

// ---------------------------------------------------------------------------------------------
// The parent: the server, the children, the phases, the tables

/// The parent's own connection to the server, for INFO and CLIENT LIST; reconnects after a
/// restart. `sent` counts its commands, so that they can be taken out of the server's count.
class Sampler {
 public:
  explicit Sampler(std::uint16_t port) : port_(port) {}
  ~Sampler() {
    if (c_) redisFree(c_);
  }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  long long sent = 0;

  /// The reply as text, or nullopt (connection failed: the next call reconnects).
  std::optional<std::string> command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    for (int attempt = 0; attempt < 2; ++attempt) {  // a second one on a fresh connection
      if (!c_ && !connect()) return std::nullopt;
      ++sent;
      auto* r = static_cast<redisReply*>(
          redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data()));
      if (!r) {
        redisFree(c_);
        c_ = nullptr;
        continue;
      }
      std::string out;
      if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
          r->type == REDIS_REPLY_ERROR) {
        out.assign(r->str, r->len);
      } else if (r->type == REDIS_REPLY_INTEGER) {
        out = std::to_string(r->integer);
      } else if (r->type == REDIS_REPLY_ARRAY) {
        for (std::size_t i = 0; i < r->elements; ++i) {
          if (i) out += ' ';
          if (r->element[i]->str) out.append(r->element[i]->str, r->element[i]->len);
        }
      }
      freeReplyObject(r);
      return out;
    }
    return std::nullopt;
  }

 private:
  bool connect() {
    timeval tv{10, 0};
    c_ = redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (!c_ || c_->err) {
      if (c_) redisFree(c_);
      c_ = nullptr;
      return false;
    }
    redisSetTimeout(c_, tv);
    return true;
  }

  std::uint16_t port_;
  redisContext* c_ = nullptr;
};

/// What the server said at one moment.
struct ServerSample {
  bool ok = false;
  long long t_ns = 0;      // when INFO was asked
  long long sent = 0;      // the sampler's commands sent before that INFO
  double cpu_s = 0;        // used_cpu_sys + used_cpu_user
  long long commands = 0;  // total_commands_processed
  long long clients = 0;   // connected_clients (the sampler's included)
  long long used_memory = 0;
  long long listed = 0;  // CLIENT LIST lines, the sampler's excluded
  double tot_mem_mean = 0;
  long long tot_mem_max = 0;
};

std::string info_field(const std::string& info, const std::string& field) {
  const auto at = info.find("\n" + field + ":");
  if (at == std::string::npos) return {};
  const auto start = at + field.size() + 2;
  return info.substr(start, info.find('\r', start) - start);
}

void read_info(Sampler& s, ServerSample& out) {
  out.sent = s.sent;
  out.t_ns = now_ns();
  const auto info = s.command({"INFO"});
  if (!info) return;
  const std::string text = "\n" + *info;
  out.ok = true;
  out.cpu_s = std::atof(info_field(text, "used_cpu_sys").c_str()) +
              std::atof(info_field(text, "used_cpu_user").c_str());
  out.commands = std::atoll(info_field(text, "total_commands_processed").c_str());
  out.clients = std::atoll(info_field(text, "connected_clients").c_str());
  out.used_memory = std::atoll(info_field(text, "used_memory").c_str());
}

void read_client_list(Sampler& s, ServerSample& out) {
  const auto list = s.command({"CLIENT", "LIST"});
  if (!list) return;
  std::istringstream lines(*list);
  long long sum = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("cmd=client|list") != std::string::npos) continue;  // the sampler
    const auto at = line.find(" tot-mem=");
    if (at == std::string::npos) continue;
    const long long mem = std::atoll(line.c_str() + at + 9);
    ++out.listed;
    sum += mem;
    out.tot_mem_max = std::max(out.tot_mem_max, mem);
  }
  if (out.listed > 0) out.tot_mem_mean = static_cast<double>(sum) / static_cast<double>(out.listed);
}

/// The servers the fleet uses, one sampler each: the standalone server, or each master of a
/// Cluster.
using Samplers = std::vector<std::unique_ptr<Sampler>>;

/// Every server at one moment, and their sum (times: the first server's).
struct Samples {
  ServerSample total;
  std::vector<ServerSample> nodes;
};

void add_up(Samples& s) {
  ServerSample& t = s.total;
  t.ok = !s.nodes.empty();
  double mem_sum = 0;
  for (const auto& n : s.nodes) {
    t.ok = t.ok && n.ok;
    t.sent += n.sent;
    t.cpu_s += n.cpu_s;
    t.commands += n.commands;
    t.clients += n.clients;
    t.used_memory += n.used_memory;
    t.listed += n.listed;
    mem_sum += n.tot_mem_mean * static_cast<double>(n.listed);
    t.tot_mem_max = std::max(t.tot_mem_max, n.tot_mem_max);
  }
  if (!s.nodes.empty()) t.t_ns = s.nodes.front().t_ns;
  if (t.listed > 0) t.tot_mem_mean = mem_sum / static_cast<double>(t.listed);
}

/// Before a phase: CLIENT LIST of every server, then INFO of every server (so the phase's
/// window holds only those INFOs).
Samples sample_before(Samplers& s) {
  Samples out;
  out.nodes.resize(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) read_client_list(*s[i], out.nodes[i]);
  for (std::size_t i = 0; i < s.size(); ++i) read_info(*s[i], out.nodes[i]);
  add_up(out);
  return out;
}

/// After a phase: INFO of every server, `between` (another server's INFO in the same
/// window), then CLIENT LIST of every server.
Samples sample_after(Samplers& s, const std::function<void()>& between = {}) {
  Samples out;
  out.nodes.resize(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) read_info(*s[i], out.nodes[i]);
  if (between) between();
  for (std::size_t i = 0; i < s.size(); ++i) read_client_list(*s[i], out.nodes[i]);
  add_up(out);
  return out;
}

std::string sample_json(const ServerSample& s) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "{\"ok\":%s,\"cpu_s\":%.4f,\"commands\":%lld,\"connected_clients\":%lld,"
                "\"used_memory\":%lld,\"clients_listed\":%lld,\"tot_mem_mean\":%.0f,"
                "\"tot_mem_max\":%lld}",
                s.ok ? "true" : "false", s.cpu_s, s.commands, s.clients, s.used_memory, s.listed,
                s.tot_mem_mean, s.tot_mem_max);
  return buf;
}

/// One child process and its pipes.
struct ChildProc {
  pid_t pid = -1;
  int ctl = -1, out = -1;  // our ends: write commands, read lines
  std::string buffer;      // bytes of a line not yet complete
  int waiters = 0;
};

/// One child's answer to a phase, parsed.
struct Report {
  std::map<std::string, std::string> kv;
  std::map<std::tuple<std::string, std::string, std::string>, long> errors;
  std::vector<std::tuple<long long, long long, std::uint64_t>> waits;

  double num(const std::string& k) const {
    const auto it = kv.find(k);
    return it == kv.end() ? 0 : std::atof(it->second.c_str());
  }
  long long ll(const std::string& k) const {
    const auto it = kv.find(k);
    return it == kv.end() ? 0 : std::atoll(it->second.c_str());
  }
};

Report parse_report(const std::string& line) {
  Report r;
  for (const auto& token : split(line, ' ')) {
    const auto eq = token.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key == "e") {
      const auto f = split(value, ',');
      if (f.size() == 4)
        r.errors[{decode(f[0]), decode(f[1]), decode(f[2])}] += std::atol(f[3].c_str());
    } else if (key == "w") {
      const auto f = split(value, ',');
      if (f.size() == 3) {
        r.waits.emplace_back(std::atoll(f[0].c_str()), std::atoll(f[1].c_str()),
                             std::strtoull(f[2].c_str(), nullptr, 10));
      }
    } else {
      r.kv[key] = value;
    }
  }
  return r;
}

/// Reads one line from every child until `deadline`. Children that did not answer (or whose
/// pipe closed) are named in `missing`.
std::vector<Report> collect(std::vector<ChildProc>& children, Clock::time_point deadline,
                            std::vector<int>& missing) {
  std::vector<std::optional<std::string>> lines(children.size());
  std::vector<bool> closed(children.size(), false);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < children.size(); ++i) {
      auto& c = children[i];
      if (!lines[i]) {
        const auto nl = c.buffer.find('\n');
        if (nl != std::string::npos) {
          lines[i] = c.buffer.substr(0, nl);
          c.buffer.erase(0, nl + 1);
        }
      }
      if (!lines[i] && !closed[i]) {
        fds.push_back({c.out, POLLIN, 0});
        which.push_back(i);
      }
    }
    if (fds.empty()) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t got = ::read(fds[k].fd, buf, sizeof buf);
      if (got > 0) {
        children[which[k]].buffer.append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        closed[which[k]] = true;
      }
    }
  }
  std::vector<Report> out;
  missing.clear();
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (lines[i]) {
      out.push_back(parse_report(*lines[i]));
    } else {
      missing.push_back(static_cast<int>(i));
    }
  }
  return out;
}

void kill_children(std::vector<ChildProc>& children) {
  for (auto& c : children) {
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      c.pid = -1;
    }
  }
}

/// Asks the children to quit; kills those still there after 10 s.
void stop_children(std::vector<ChildProc>& children) {
  for (auto& c : children) write_all(c.ctl, std::string(1, phase_quit));
  const auto until = Clock::now() + 10s;
  for (auto& c : children) {
    while (c.pid > 0) {
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.pid = -1;
      } else if (Clock::now() > until) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &status, 0);
        c.pid = -1;
      } else {
        std::this_thread::sleep_for(20ms);
      }
    }
  }
}

struct Options {
  int processes = 4, managers = 250, idle_s = 60, waiters = 1000, pairs_s = 10;
  bool restart = true;
  bool cluster = false;  // a 3-master Redis Cluster of our own instead of one server
  std::uint16_t port = 0;
  std::string json;
  std::vector<int> sizes;     // --sizes: the sweep's fleet sizes
  bool middle_phases = true;  // idle, contention and pairs (not in the sweep)
};

/// Errors of every child, merged; "none" or one line per kind.
using ErrorMap = std::map<std::tuple<std::string, std::string, std::string>, long>;

ErrorMap merge_errors(const std::vector<Report>& reports) {
  ErrorMap all;
  for (const auto& r : reports) {
    for (const auto& [k, n] : r.errors) all[k] += n;
  }
  return all;
}

/// A storm's grants over every child: how many managers got their lock, and when the last did.
struct Grants {
  long long last_ns = 0;
  long ok = 0;
};

Grants grants_of(const std::vector<Report>& reports) {
  Grants g;
  for (const auto& r : reports) {
    g.last_ns = std::max(g.last_ns, r.ll("last_ns"));
    g.ok += r.ll("ok");
  }
  return g;
}

long error_count(const ErrorMap& e) {
  long n = 0;
  for (const auto& [k, c] : e) n += c;
  return n;
}

std::string errors_short(const ErrorMap& e) {
  if (e.empty()) return "0";
  std::string out;
  for (const auto& [k, n] : e) {
    if (!out.empty()) out += ", ";
    out += std::get<0>(k) + " " + std::get<1>(k) + ": " + std::to_string(n);
  }
  return out;
}

std::string errors_json(const ErrorMap& e) {
  std::string out = "[";
  for (const auto& [k, n] : e) {
    if (out.size() > 1) out += ",";
    out += "{\"op\":" + json_string(std::get<0>(k)) + ",\"name\":" + json_string(std::get<1>(k)) +
           ",\"message\":" + json_string(std::get<2>(k)) + ",\"count\":" + std::to_string(n) + "}";
  }
  return out + "]";
}

void print_errors(const ErrorMap& e) {
  if (e.empty()) {
    std::printf("\nErrors: none.\n");
    return;
  }
  std::printf("\nErrors:\n");
  for (const auto& [k, n] : e) {
    std::printf("- %s `%s` (%s): %ld\n", std::get<0>(k).c_str(), std::get<1>(k).c_str(),
                std::get<2>(k).c_str(), n);
  }
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double mb(long long bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string fleet_cells(const Options& o) {
  return std::to_string(o.processes * o.managers) + " | " + std::to_string(o.processes) + " x " +
         std::to_string(o.managers);
}

/// A JSON object with `extra` (",\"key\":value...") added before its closing brace.
std::string json_with(std::string object, const std::string& extra) {
  if (extra.empty() || object.empty()) return object;
  object.pop_back();
  return object + extra + "}";
}

/// Cluster: each master's share of a phase (CPU over its own window, commands, clients) and
/// the spread of their CPU, as a table; returns the phase's JSON fields for it.
std::string masters_table(const Samples& before, const Samples& after,
                          const std::vector<std::uint16_t>& ports) {
  std::printf(
      "\nPer master:\n\n| master | port | server CPU (%% of a core) | commands (sampler's "
      "excluded) | connected_clients before -> after | used_memory after |\n"
      "|---|---|---|---|---|---|\n");
  std::string json = ",\"masters\":[";
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < after.nodes.size() && i < before.nodes.size(); ++i) {
    const auto& b = before.nodes[i];
    const auto& a = after.nodes[i];
    const double wall = static_cast<double>(a.t_ns - b.t_ns) / 1e9;
    const double pct = 100.0 * (a.cpu_s - b.cpu_s) / std::max(1e-9, wall);
    const long long commands = a.commands - b.commands - (a.sent - b.sent);
    lo = i == 0 ? pct : std::min(lo, pct);
    hi = i == 0 ? pct : std::max(hi, pct);
    std::printf("| %zu | %u | %.3f %% | %lld | %lld -> %lld | %.1f MB |\n", i, ports.at(i), pct,
                commands, b.clients, a.clients, mb(a.used_memory));
    json += std::string(i ? "," : "") + "{\"port\":" + std::to_string(ports.at(i)) +
            ",\"server_cpu_pct\":" + fmt("%.4f", pct) +
            ",\"commands\":" + std::to_string(commands) +
            ",\"connected_clients_before\":" + std::to_string(b.clients) +
            ",\"connected_clients_after\":" + std::to_string(a.clients) +
            ",\"used_memory_after\":" + std::to_string(a.used_memory) + "}";
  }
  const bool spread_known = lo > 0;
  const double spread = spread_known ? 100.0 * (hi / lo - 1.0) : 0.0;
  std::printf("\nCPU spread over the masters (max / min - 1): %s.\n",
              spread_known ? fmt("%.1f %%", spread).c_str() : "n/a (a master used no CPU)");
  return json + "],\"master_cpu_spread_pct\":" + (spread_known ? fmt("%.2f", spread) : "null");
}

/// The idle phase's baseline: a second redis-server started with the fleet server's options,
/// and `n` raw idle connections to it (hiredis; each sends one CLIENT SETNAME rawidle, reads
/// its reply, then nothing). The connections close, then the server stops, with the object.
class RawIdle {
 public:
  RawIdle(const std::vector<std::string>& server_args, long long n) : server_(server_args) {
    const timeval tv{10, 0};
    conns_.reserve(static_cast<std::size_t>(std::max(0LL, n)));
    for (long long i = 0; i < n; ++i) {
      redisContext* c = redisConnectWithTimeout("127.0.0.1", server_.port(), tv);
      if (!c || c->err) {
        if (c) redisFree(c);
        ++failed;
        continue;
      }
      redisSetTimeout(c, tv);
      auto* r = static_cast<redisReply*>(redisCommand(c, "CLIENT SETNAME rawidle"));
      const bool ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      if (!ok) {
        redisFree(c);
        ++failed;
        continue;
      }
      conns_.push_back(c);
    }
  }
  ~RawIdle() {
    for (auto* c : conns_) redisFree(c);
  }
  RawIdle(const RawIdle&) = delete;
  RawIdle& operator=(const RawIdle&) = delete;

  std::uint16_t port() const { return server_.port(); }
  long long opened() const { return static_cast<long long>(conns_.size()); }
  long long failed = 0;

 private:
  redis_lock::test::RedisServer server_;
  std::vector<redisContext*> conns_;
};

/// What a run of the fleet gives back: its JSON, its exit code, and what the sweep keeps.
struct RunResult {
  int code = 0;
  bool hung = false;
  std::string json;
  bool storm_ran = false, storm_all = false;
  double storm_s = 0;
  ErrorMap storm_errors;
  long long clients_after_storm = 0, used_memory_after_storm = 0;
  bool restart_ran = false, restart_all = false;
  double restart_s = 0, restart_down_s = 0;
  ErrorMap restart_errors;
};

/// One fleet on its servers (started here unless --port), phase by phase.
RunResult run_fleet(Options o, rlim_t fd_limit) {
  RunResult result;
  const int fleet = o.processes * o.managers;
  o.waiters = std::min(o.waiters, fleet);

  // The servers: a Cluster of our own; or a server of our own (maxclients as high as our fd
  // limit lets it go); or the one at --port.
  std::unique_ptr<redis_lock::test::RedisServer> server;
  std::unique_ptr<redis_lock::test::RedisCluster> cluster;
  std::vector<std::uint16_t> ports;
  if (o.cluster) {
    cluster = std::make_unique<redis_lock::test::RedisCluster>(3, 0);
    for (std::size_t i = 0; i < cluster->size(); ++i) ports.push_back(cluster->node(i).port());
    o.port = ports.front();
    o.restart = false;
  } else if (o.port == 0) {
    const long long maxclients = std::min<long long>(20000, static_cast<long long>(fd_limit) - 64);
    server = std::make_unique<redis_lock::test::RedisServer>(
        std::vector<std::string>{"--maxclients", std::to_string(maxclients)});
    o.port = server->port();
    ports.push_back(o.port);
  } else {
    ports.push_back(o.port);
    if (o.restart) {
      std::fprintf(stderr,
                   "fleet_bench: --port given: the restart phase is skipped (not our server)\n");
      o.restart = false;
    }
  }
  Samplers samplers;
  for (const auto p : ports) samplers.push_back(std::make_unique<Sampler>(p));
  Sampler& sampler = *samplers.front();
  std::string maxclients = sampler.command({"CONFIG", "GET", "maxclients"}).value_or("? ?");
  maxclients = maxclients.substr(maxclients.find(' ') + 1);  // the reply is "maxclients N"
  const auto version =
      info_field("\n" + sampler.command({"INFO", "server"}).value_or(""), "redis_version");
  // The raw baseline's server is started with the same options as the fleet's.
  const std::vector<std::string> server_args = {"--maxclients", maxclients};

  std::string port_list;
  for (const auto p : ports) port_list += (port_list.empty() ? "" : ", ") + std::to_string(p);
  std::printf(
      "# fleet_bench: %d managers (%d processes x %d), %s %s on port%s %s "
      "(maxclients %s), fd limit %llu, load average %s\n",
      fleet, o.processes, o.managers,
      o.cluster ? "a 3-master Redis Cluster (no replicas) of redis-server" : "one redis-server",
      version.c_str(), ports.size() > 1 ? "s" : "", port_list.c_str(), maxclients.c_str(),
      static_cast<unsigned long long>(fd_limit), load_average().c_str());
  std::fflush(stdout);

  // The children: fork + exec of this program, each with its two pipes (exec'd through
  // /proc/self/exe; argv[0] is the program's path, for ps).
  std::string self(4096, '\0');
  const ssize_t self_len = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  self.resize(self_len > 0 ? static_cast<std::size_t>(self_len) : 0);
  if (self.empty()) self = "fleet_bench";
  std::vector<ChildProc> children(static_cast<std::size_t>(o.processes));
  for (int k = 0; k < o.processes; ++k) {
    auto& c = children[static_cast<std::size_t>(k)];
    c.waiters = o.waiters / o.processes + (k < o.waiters % o.processes ? 1 : 0);
    int ctl[2], out[2];
    if (::pipe2(ctl, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      std::perror("pipe2");
      kill_children(children);
      result.code = 3;
      return result;
    }
    std::vector<std::string> args = {self,
                                     "--child",
                                     std::to_string(k),
                                     "--port",
                                     std::to_string(o.port),
                                     "--managers",
                                     std::to_string(o.managers),
                                     "--waiters-here",
                                     std::to_string(c.waiters),
                                     "--idle-seconds",
                                     std::to_string(o.idle_s),
                                     "--pairs-seconds",
                                     std::to_string(o.pairs_s),
                                     "--ctl-fd",
                                     std::to_string(ctl[0]),
                                     "--out-fd",
                                     std::to_string(out[1])};
    if (o.cluster) {
      std::string list;
      for (const auto p : ports) list += (list.empty() ? "" : ",") + std::to_string(p);
      args.push_back("--cluster-ports");
      args.push_back(list);
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      kill_children(children);
      result.code = 3;
      return result;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent
      ::fcntl(ctl[0], F_SETFD, 0);         // these two survive the exec; the rest close
      ::fcntl(out[1], F_SETFD, 0);
      std::vector<char*> cargv;
      for (auto& a : args) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      std::_Exit(127);
    }
    ::close(ctl[0]);
    ::close(out[1]);
    c.pid = pid;
    c.ctl = ctl[1];
    c.out = out[0];
  }

  std::vector<int> missing;
  collect(children, Clock::now() + 60s, missing);  // "ready" from each
  if (!missing.empty()) {
    std::printf("\n**%zu of %d children did not get ready within 60 s**\n", missing.size(),
                o.processes);
    kill_children(children);
    result.code = 3;
    result.hung = true;
    return result;
  }

  std::vector<std::string> phases_json;
  bool any_error = false, hung = false;
  // Starts a phase in every child at once and waits for every answer; false: a child hung.
  const auto run_phase = [&](char cmd, std::chrono::seconds bound, const char* name,
                             std::vector<Report>& reports, long long& go_ns,
                             const std::function<void()>& after_go) {
    go_ns = now_ns();
    for (auto& c : children) write_all(c.ctl, std::string(1, cmd));
    if (after_go) after_go();
    reports =
        collect(children, Clock::time_point(std::chrono::nanoseconds(go_ns)) + bound, missing);
    if (missing.empty()) return true;
    std::string who;
    for (const int m : missing) who += (who.empty() ? "" : ", ") + std::to_string(m);
    std::printf(
        "\n**Phase %s: child(ren) %s did not finish within %lld s: hung. Killing the "
        "children.**\n",
        name, who.c_str(), static_cast<long long>(bound.count()));
    std::fflush(stdout);
    phases_json.push_back("{\"name\":\"" + std::string(name) + "\",\"hung\":[" + who + "]}");
    hung = true;
    return false;
  };

  const auto header = [&](const char* title) { std::printf("\n## %s\n\n", title); };
  // Cluster: the per-master table of a phase, and its JSON fields ("" on one server).
  const auto per_master = [&](const Samples& before, const Samples& after) -> std::string {
    if (!o.cluster) return {};
    return masters_table(before, after, ports);
  };

  const auto finish = [&]() {
    if (hung) {
      kill_children(children);
    } else {
      stop_children(children);
    }
    const int code = hung ? 3 : any_error ? 1 : 0;
    result.code = code;
    result.hung = hung;
    std::string ports_json;
    for (const auto p : ports) ports_json += (ports_json.empty() ? "" : ",") + std::to_string(p);
    result.json = "{\"processes\":" + std::to_string(o.processes) +
                  ",\"managers_per_process\":" + std::to_string(o.managers) +
                  ",\"managers\":" + std::to_string(fleet) +
                  ",\"topology\":" + (o.cluster ? "\"cluster\"" : "\"standalone\"") +
                  ",\"ports\":[" + ports_json + "],\"redis_version\":" + json_string(version) +
                  ",\"maxclients\":" + json_string(maxclients) +
                  ",\"server_started_here\":" + (server || cluster ? "true" : "false") +
                  ",\"hung\":" + (hung ? "true" : "false") +
                  ",\"exit_code\":" + std::to_string(code) + ",\"phases\":[";
    for (std::size_t i = 0; i < phases_json.size(); ++i) {
      result.json += (i ? "," : "") + phases_json[i];
    }
    result.json += "]}";
    return result;
  };

  std::vector<Report> reports;
  long long go_ns = 0;

  // 1. The connect storm.
  {
    const auto sb = sample_before(samplers);
    const auto& before = sb.total;
    if (!run_phase(phase_storm, storm_wait + answer_margin, "storm", reports, go_ns, {})) {
      return finish();
    }
    const auto sa = sample_after(samplers);
    const auto& after = sa.total;
    const auto errors = merge_errors(reports);
    const auto [last, ok] = grants_of(reports);
    const bool all = ok == fleet;
    const double to_all_s = static_cast<double>(last - go_ns) / 1e9;
    header("1. Connect storm: every manager acquires its own resource (ttl 10 s, wait 30 s)");
    std::printf(
        "| managers | P x M | all held after | acquired | errors | connected_clients "
        "before -> after | used_memory before -> after | tot-mem per client mean / "
        "max |\n|---|---|---|---|---|---|---|---|\n");
    std::printf(
        "| %s | %s | %ld / %d | %ld | %lld -> %lld | %.1f -> %.1f MB | %.1f / %.1f KB "
        "(%lld clients) |\n",
        fleet_cells(o).c_str(),
        all ? fmt("%.3f s", to_all_s).c_str()
            : ("never (last grant " + fmt("%.3f s", to_all_s) + ")").c_str(),
        ok, fleet, error_count(errors), before.clients, after.clients, mb(before.used_memory),
        mb(after.used_memory), after.tot_mem_mean / 1024.0,
        static_cast<double>(after.tot_mem_max) / 1024.0, after.listed);
    if (o.cluster) std::printf("\n(Server columns: summed over the masters.)\n");
    const auto masters = per_master(sb, sa);
    print_errors(errors);
    std::fflush(stdout);
    any_error |= !errors.empty() || !all;
    result.storm_ran = true;
    result.storm_all = all;
    result.storm_s = to_all_s;
    result.storm_errors = errors;
    result.clients_after_storm = after.clients;
    result.used_memory_after_storm = after.used_memory;
    phases_json.push_back(json_with(
        "{\"name\":\"storm\",\"acquired\":" + std::to_string(ok) + ",\"all_held\":" +
            (all ? "true" : "false") + ",\"all_held_after_s\":" + fmt("%.4f", to_all_s) +
            ",\"errors\":" + errors_json(errors) + ",\"server_before\":" + sample_json(before) +
            ",\"server_after\":" + sample_json(after) + "}",
        masters));
  }

  // 2. Idle, beside a raw baseline: a second server with as many raw idle connections.
  if (o.middle_phases) {
    std::unique_ptr<RawIdle> raw;
    std::unique_ptr<Sampler> raw_sampler;
    std::string raw_failure;
    if (!o.cluster) {
      try {
        ServerSample now;
        read_info(sampler, now);
        // As many connected_clients as the fleet's server has now (its sampler's included):
        // that many minus one raw connections, and the raw server's own sampler.
        raw = std::make_unique<RawIdle>(server_args, std::max(0LL, now.clients - 1));
        raw_sampler = std::make_unique<Sampler>(raw->port());
      } catch (const std::exception& e) {
        raw_failure = e.what();
        raw.reset();
      }
    }
    const auto sb = sample_before(samplers);
    const auto& before = sb.total;
    ServerSample raw_before, raw_after;
    if (raw_sampler) read_info(*raw_sampler, raw_before);
    if (!run_phase(phase_idle, std::chrono::seconds(o.idle_s) + answer_margin, "idle", reports,
                   go_ns, {})) {
      return finish();
    }
    const auto sa = sample_after(samplers, [&] {
      if (raw_sampler) read_info(*raw_sampler, raw_after);
    });
    const auto& after = sa.total;
    const auto errors = merge_errors(reports);
    const double wall = static_cast<double>(after.t_ns - before.t_ns) / 1e9;
    const double server_cpu = after.cpu_s - before.cpu_s;
    const double server_pct = 100.0 * server_cpu / std::max(1e-9, wall);
    const long long sampler_cmds = after.sent - before.sent;
    const long long commands = after.commands - before.commands - sampler_cmds;
    double cpu_sum = 0, cpu_max = 0, rss_sum = 0, growth_sum = 0;
    for (const auto& r : reports) {
      const double pct = 100.0 * r.num("cpu_s") / std::max(1e-9, r.num("wall_s"));
      cpu_sum += pct;
      cpu_max = std::max(cpu_max, pct);
      rss_sum += r.num("rss_kb");
      growth_sum += r.num("rss_storm_kb") - r.num("rss_before_kb");
    }
    // The raw baseline over the same window (its INFOs right after the fleet server's).
    const bool raw_ok = raw && raw_before.ok && raw_after.ok;
    const double raw_wall = static_cast<double>(raw_after.t_ns - raw_before.t_ns) / 1e9;
    const double raw_pct =
        raw_ok ? 100.0 * (raw_after.cpu_s - raw_before.cpu_s) / std::max(1e-9, raw_wall) : 0.0;
    const bool ratio_ok = raw_ok && raw_pct > 0;
    std::string raw_cell, ratio_cell = "n/a";
    if (raw_ok) {
      raw_cell = fmt("%.3f %%", raw_pct) + " (" + std::to_string(raw_after.clients) + " clients)";
      if (ratio_ok) ratio_cell = fmt("%.2fx", server_pct / raw_pct);
    } else if (o.cluster) {
      raw_cell = "n/a (standalone only)";
    } else {
      raw_cell = "n/a (" + (raw_failure.empty() ? std::string("no sample") : raw_failure) + ")";
    }
    const double n = static_cast<double>(reports.size());
    header("2. Idle: every manager holds its connections and does nothing");
    std::printf(
        "| managers | P x M | seconds | server CPU (%% of a core) | raw baseline server CPU "
        "(same connections, same window) | fleet / raw | server commands "
        "(sampler's excluded) | client CPU per child mean / max (%% of a core) | RSS "
        "per manager | RSS growth per manager (before managers -> after storm) | "
        "connected_clients | server used_memory | tot-mem per client mean / max |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf(
        "| %s | %.1f | %.3f %% | %s | %s | %lld | %.3f %% / %.3f %% | %.1f KB | %.1f KB | "
        "%lld | %.1f MB | %.1f / %.1f KB |\n",
        fleet_cells(o).c_str(), wall, server_pct, raw_cell.c_str(), ratio_cell.c_str(), commands,
        cpu_sum / n, cpu_max, rss_sum / fleet, growth_sum / fleet, after.clients,
        mb(after.used_memory), after.tot_mem_mean / 1024.0,
        static_cast<double>(after.tot_mem_max) / 1024.0);
    if (raw) {
      std::printf(
          "\nRaw baseline: a second redis-server with the same options, %lld raw idle "
          "connections (hiredis; one CLIENT SETNAME each, then nothing%s) and its sampler, "
          "INFO cpu read right after the fleet server's at both ends of the window.\n",
          raw->opened(),
          raw->failed ? (", " + std::to_string(raw->failed) + " failed to open").c_str() : "");
    } else if (o.cluster) {
      std::printf(
          "\n(Server columns: summed over the masters. The raw baseline is measured on one "
          "server only.)\n");
    }
    const auto masters = per_master(sb, sa);
    print_errors(errors);
    std::fflush(stdout);
    any_error |= !errors.empty();
    std::string raw_json = ",\"raw_baseline\":null,\"fleet_over_raw\":null";
    if (raw) {
      raw_json = ",\"raw_baseline\":{\"connections\":" + std::to_string(raw->opened()) +
                 ",\"failed\":" + std::to_string(raw->failed) +
                 ",\"connected_clients\":" + std::to_string(raw_after.clients) +
                 ",\"seconds\":" + fmt("%.3f", raw_wall) +
                 ",\"server_cpu_pct\":" + (raw_ok ? fmt("%.4f", raw_pct) : "null") +
                 ",\"server_commands\":" +
                 std::to_string(raw_after.commands - raw_before.commands -
                                (raw_after.sent - raw_before.sent)) +
                 "},\"fleet_over_raw\":" + (ratio_ok ? fmt("%.3f", server_pct / raw_pct) : "null");
    }
    phases_json.push_back(json_with(
        "{\"name\":\"idle\",\"seconds\":" + fmt("%.3f", wall) +
            ",\"server_cpu_pct\":" + fmt("%.4f", server_pct) + raw_json + ",\"server_commands\":" +
            std::to_string(commands) + ",\"sampler_commands\":" + std::to_string(sampler_cmds) +
            ",\"client_cpu_pct_mean\":" + fmt("%.4f", cpu_sum / n) + ",\"client_cpu_pct_max\":" +
            fmt("%.4f", cpu_max) + ",\"rss_per_manager_kb\":" + fmt("%.2f", rss_sum / fleet) +
            ",\"rss_growth_per_manager_kb\":" + fmt("%.2f", growth_sum / fleet) +
            ",\"errors\":" + errors_json(errors) + ",\"server_before\":" + sample_json(before) +
            ",\"server_after\":" + sample_json(after) + "}",
        masters));
    raw_sampler.reset();
    raw.reset();  // the raw connections close, the second server stops
  }

  // 3. Contention on one resource.
  if (o.middle_phases && o.waiters > 0) {
    const auto sb = sample_before(samplers);
    const auto& before = sb.total;
    if (!run_phase(phase_contention, contention_wait + answer_margin, "contention", reports, go_ns,
                   {})) {
      return finish();
    }
    const auto sa = sample_after(samplers);
    const auto& after = sa.total;
    auto errors = merge_errors(reports);
    std::vector<std::tuple<long long, long long, std::uint64_t>> waits;
    for (const auto& r : reports) waits.insert(waits.end(), r.waits.begin(), r.waits.end());
    // Grant order is the order of the fencing tokens (strictly increasing per resource).
    std::sort(waits.begin(), waits.end(),
              [](const auto& a, const auto& b) { return std::get<2>(a) < std::get<2>(b); });
    long duplicates = 0;
    for (std::size_t i = 1; i < waits.size(); ++i) {
      if (std::get<2>(waits[i]) == std::get<2>(waits[i - 1])) ++duplicates;
    }
    if (duplicates > 0)
      errors[{"check", "duplicate_fencing_token", "two grants, one token"}] = duplicates;
    const long served = static_cast<long>(waits.size());
    long long first_grant = 0, last_grant = 0, first_start = 0, last_start = 0, max_wait = 0;
    for (const auto& [start, grant, fencing] : waits) {
      if (first_grant == 0 || grant < first_grant) first_grant = grant;
      last_grant = std::max(last_grant, grant);
      if (first_start == 0 || start < first_start) first_start = start;
      last_start = std::max(last_start, start);
      max_wait = std::max(max_wait, grant - start);
    }
    // Inversions among the waiters that queued (every grant but the first): pairs granted in
    // one order that started in the other; and those whose starts differ by more than 5 ms.
    const long long tolerance_ns = 5'000'000;
    long long inversions = 0, inversions_beyond = 0, pair_count = 0;
    for (std::size_t i = 1; i < waits.size(); ++i) {
      for (std::size_t j = i + 1; j < waits.size(); ++j) {
        ++pair_count;
        const long long si = std::get<0>(waits[i]), sj = std::get<0>(waits[j]);
        if (si > sj) ++inversions;
        if (si > sj + tolerance_ns) ++inversions_beyond;
      }
    }
    const double span = static_cast<double>(last_grant - first_grant) / 1e9;
    const double handoffs = served > 1 && span > 0 ? static_cast<double>(served - 1) / span : 0;
    const double server_cpu = after.cpu_s - before.cpu_s;
    const bool all = served == o.waiters;
    header("3. Contention: W waiters on one resource (ttl 10 s, wait 60 s), each releases at once");
    std::printf(
        "| managers | P x M | waiters | served | errors | hand-offs/s | server CPU per "
        "hand-off | max wait | starts spread over | inversions (of pairs) | inversions "
        "beyond 5 ms | connected_clients before -> after |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf(
        "| %s | %d | %ld%s | %ld | %.0f | %.1f us | %.3f s | %.1f ms | %lld (%.2f %%) | "
        "%lld | %lld -> %lld |\n",
        fleet_cells(o).c_str(), o.waiters, served, all ? " (all)" : "", error_count(errors),
        handoffs, 1e6 * server_cpu / o.waiters, static_cast<double>(max_wait) / 1e9,
        static_cast<double>(last_start - first_start) / 1e6, inversions,
        pair_count ? 100.0 * static_cast<double>(inversions) / static_cast<double>(pair_count)
                   : 0.0,
        inversions_beyond, before.clients, after.clients);
    std::string masters;
    if (o.cluster) {
      // The hot resource's lease key is `lock:{fleet:hot}`: its slot is that of the hash tag.
      const auto slot_text = sampler.command({"CLUSTER", "KEYSLOT", "fleet:hot"}).value_or("");
      std::string where = "`fleet:hot` lives on one master";
      if (!slot_text.empty() && std::isdigit(static_cast<unsigned char>(slot_text[0]))) {
        const auto slot = static_cast<std::uint16_t>(std::atoi(slot_text.c_str()));
        try {
          const auto m = cluster->master_of(slot);
          where += " (slot " + slot_text + ": master " + std::to_string(m) + ", port " +
                   std::to_string(cluster->node(m).port()) + ")";
        } catch (const std::exception&) {
          where += " (slot " + slot_text + ")";
        }
      }
      std::printf(
          "\n(Server columns: summed over the masters.) The one hot resource %s: every "
          "hand-off is that master's work; the others serve only the waiters' connections.\n",
          where.c_str());
      masters = per_master(sb, sa);
    }
    print_errors(errors);
    std::fflush(stdout);
    any_error |= !errors.empty() || !all;
    phases_json.push_back(json_with(
        "{\"name\":\"contention\",\"waiters\":" + std::to_string(o.waiters) + ",\"served\":" +
            std::to_string(served) + ",\"handoffs_per_s\":" + fmt("%.1f", handoffs) +
            ",\"server_cpu_us_per_handoff\":" + fmt("%.2f", 1e6 * server_cpu / o.waiters) +
            ",\"max_wait_s\":" + fmt("%.4f", static_cast<double>(max_wait) / 1e9) +
            ",\"start_spread_ms\":" +
            fmt("%.3f", static_cast<double>(last_start - first_start) / 1e6) + ",\"inversions\":" +
            std::to_string(inversions) + ",\"inversion_pairs\":" + std::to_string(pair_count) +
            ",\"inversions_beyond_5ms\":" + std::to_string(inversions_beyond) +
            ",\"duplicate_fencing_tokens\":" + std::to_string(duplicates) +
            ",\"errors\":" + errors_json(errors) + ",\"server_before\":" + sample_json(before) +
            ",\"server_after\":" + sample_json(after) + "}",
        masters));
  }

  // 4. Independent resources, all managers at once.
  if (o.middle_phases) {
    const auto sb = sample_before(samplers);
    const auto& before = sb.total;
    if (!run_phase(phase_pairs, std::chrono::seconds(o.pairs_s) + answer_margin, "pairs", reports,
                   go_ns, {})) {
      return finish();
    }
    const auto sa = sample_after(samplers);
    const auto& after = sa.total;
    const auto errors = merge_errors(reports);
    long long pairs = 0;
    double wall = 0, client_cpu = 0;
    for (const auto& r : reports) {
      pairs += r.ll("pairs");
      wall = std::max(wall, r.num("wall_s"));
      client_cpu += r.num("cpu_s");
    }
    const double rate = static_cast<double>(pairs) / std::max(1e-9, wall);
    const double server_wall = static_cast<double>(after.t_ns - before.t_ns) / 1e9;
    const double server_frac = (after.cpu_s - before.cpu_s) / std::max(1e-9, server_wall);
    header("4. Independent resources: every manager loops acquire+release on its own resource");
    std::printf(
        "| managers | P x M | seconds | pairs | pairs/s | server CPU (%% of a core) | "
        "pairs/s per server core | client CPU per pair | errors |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %.2f | %lld | %.0f | %.1f %% | %.0f | %.1f us | %ld |\n",
                fleet_cells(o).c_str(), wall, pairs, rate, 100.0 * server_frac,
                server_frac > 0 ? rate / server_frac : 0.0,
                pairs ? 1e6 * client_cpu / static_cast<double>(pairs) : 0.0, error_count(errors));
    if (o.cluster) std::printf("\n(Server columns: summed over the masters.)\n");
    const auto masters = per_master(sb, sa);
    print_errors(errors);
    std::fflush(stdout);
    any_error |= !errors.empty();
    phases_json.push_back(json_with(
        "{\"name\":\"pairs\",\"seconds\":" + fmt("%.3f", wall) +
            ",\"pairs\":" + std::to_string(pairs) + ",\"pairs_per_s\":" + fmt("%.1f", rate) +
            ",\"server_cpu_pct\":" + fmt("%.2f", 100.0 * server_frac) +
            ",\"pairs_per_s_per_server_core\":" +
            fmt("%.1f", server_frac > 0 ? rate / server_frac : 0.0) +
            ",\"client_cpu_us_per_pair\":" +
            fmt("%.2f", pairs ? 1e6 * client_cpu / static_cast<double>(pairs) : 0.0) +
            ",\"errors\":" + errors_json(errors) + ",\"server_before\":" + sample_json(before) +
            ",\"server_after\":" + sample_json(after) + "}",
        masters));
  }

  // 5. Server restart: SIGKILL, "go" at once, the server started again on the same port.
  if (o.cluster) {
    header("5. Restart: not run on a Cluster");
    std::printf(
        "Skipped: the restart phase kills and restarts one standalone server; a Cluster "
        "master killed without a replica takes its slots with it.\n");
    std::fflush(stdout);
  } else if (o.restart && server) {
    const auto before = sample_before(samplers).total;
    long long up_ns = 0;
    std::string restart_error;
    server->kill(SIGKILL);
    if (!run_phase(phase_restart, storm_wait + answer_margin, "restart", reports, go_ns, [&] {
          try {
            server->restart();
          } catch (const std::exception& e) {
            restart_error = e.what();
          }
          up_ns = now_ns();
        })) {
      return finish();
    }
    const auto after = sample_after(samplers).total;
    auto errors = merge_errors(reports);
    if (!restart_error.empty()) errors[{"server", "restart_failed", restart_error}] = 1;
    const auto [last, ok] = grants_of(reports);
    const bool all = ok == fleet;
    const double to_all_s = static_cast<double>(last - go_ns) / 1e9;
    const double down_s = static_cast<double>(up_ns - go_ns) / 1e9;
    header("5. Restart: SIGKILL, then every manager acquires its resource again (wait 30 s)");
    std::printf(
        "| managers | P x M | server down for | all held after kill | all held after "
        "server up | acquired | errors | connected_clients before -> after | server "
        "CPU since restart |\n|---|---|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %.3f s | %s | %s | %ld / %d | %ld | %lld -> %lld | %.2f s |\n",
                fleet_cells(o).c_str(), down_s, all ? fmt("%.3f s", to_all_s).c_str() : "never",
                all ? fmt("%.3f s", to_all_s - down_s).c_str() : "never", ok, fleet,
                error_count(errors), before.clients, after.clients, after.cpu_s);
    print_errors(errors);
    std::fflush(stdout);
    any_error |= !errors.empty() || !all;
    result.restart_ran = true;
    result.restart_all = all;
    result.restart_s = to_all_s;
    result.restart_down_s = down_s;
    result.restart_errors = errors;
    phases_json.push_back(
        "{\"name\":\"restart\",\"acquired\":" + std::to_string(ok) +
        ",\"all_held\":" + (all ? "true" : "false") + ",\"server_down_s\":" + fmt("%.4f", down_s) +
        ",\"all_held_after_kill_s\":" + fmt("%.4f", to_all_s) +
        ",\"errors\":" + errors_json(errors) + ",\"server_before\":" + sample_json(before) +
        ",\"server_after\":" + sample_json(after) + "}");
  }

  return finish();
}

int usage() {
  std::fprintf(stderr,
               "usage: fleet_bench [--processes P] [--managers M] [--idle-seconds S] "
               "[--waiters W] [--pairs-seconds T] [--restart | --no-restart] [--port PORT] "
               "[--cluster] [--sizes N1,N2,...] [--json FILE] [--quick]\n");
  return 2;
}

void write_json(const std::string& file, const std::string& text) {
  if (file.empty()) return;
  if (FILE* f = std::fopen(file.c_str(), "w")) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  } else {
    std::fprintf(stderr, "fleet_bench: cannot write %s\n", file.c_str());
  }
}

const char* exit_text(int code) {
  return code == 3 ? "a child hung" : code == 1 ? "errors in some phase" : "no errors";
}

/// --sizes: the storm and the restart for each fleet size, each on a fresh server; one table.
int run_sweep(const Options& base, rlim_t fd_limit) {
  std::vector<RunResult> runs;
  std::vector<Options> shapes;
  for (const int size : base.sizes) {
    Options o = base;
    o.managers = std::max(1, size / o.processes);
    o.middle_phases = false;
    std::printf("\n# Sweep: %d managers (%d x %d)\n\n", o.processes * o.managers, o.processes,
                o.managers);
    std::fflush(stdout);
    runs.push_back(run_fleet(o, fd_limit));
    shapes.push_back(o);
    if (runs.back().hung) break;
  }
  std::printf(
      "\n## Sweep: the storm and the restart by fleet size (each size on a fresh server)\n\n"
      "| managers | P x M | storm: all held after | storm errors | restart: all held after "
      "kill | restart errors | connected_clients after the storm | server used_memory after "
      "the storm |\n|---|---|---|---|---|---|---|---|\n");
  std::string sweep_json, runs_json;
  int code = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const auto& o = shapes[i];
    code = std::max(code, r.code);
    const auto held = [](bool ran, bool all, double s) {
      if (!ran) return std::string("not run");
      return all ? fmt("%.3f s", s) : "never (last grant " + fmt("%.3f s", s) + ")";
    };
    std::printf("| %s | %s | %s | %s | %s | %lld | %.1f MB |\n", fleet_cells(o).c_str(),
                held(r.storm_ran, r.storm_all, r.storm_s).c_str(),
                errors_short(r.storm_errors).c_str(),
                held(r.restart_ran, r.restart_all, r.restart_s).c_str(),
                r.restart_ran ? errors_short(r.restart_errors).c_str() : "-", r.clients_after_storm,
                mb(r.used_memory_after_storm));
    sweep_json += std::string(i ? "," : "") +
                  "{\"managers\":" + std::to_string(o.processes * o.managers) +
                  ",\"processes\":" + std::to_string(o.processes) +
                  ",\"managers_per_process\":" + std::to_string(o.managers) +
                  ",\"storm_all_held\":" + (r.storm_all ? "true" : "false") +
                  ",\"storm_all_held_after_s\":" + fmt("%.4f", r.storm_s) +
                  ",\"storm_errors\":" + std::to_string(error_count(r.storm_errors)) +
                  ",\"storm_error_kinds\":" + errors_json(r.storm_errors) +
                  ",\"restart_ran\":" + (r.restart_ran ? "true" : "false") +
                  ",\"restart_all_held\":" + (r.restart_all ? "true" : "false") +
                  ",\"restart_all_held_after_kill_s\":" + fmt("%.4f", r.restart_s) +
                  ",\"restart_server_down_s\":" + fmt("%.4f", r.restart_down_s) +
                  ",\"restart_errors\":" + std::to_string(error_count(r.restart_errors)) +
                  ",\"restart_error_kinds\":" + errors_json(r.restart_errors) +
                  ",\"connected_clients_after_storm\":" + std::to_string(r.clients_after_storm) +
                  ",\"used_memory_after_storm\":" + std::to_string(r.used_memory_after_storm) +
                  ",\"exit_code\":" + std::to_string(r.code) + "}";
    runs_json += (i ? "," : "") + (r.json.empty() ? std::string("null") : r.json);
  }
  std::fflush(stdout);
  write_json(base.json, "{\"sweep\":[" + sweep_json + "],\"runs\":[" + runs_json +
                            "],\"load_average_end\":" + json_string(load_average()) +
                            ",\"exit_code\":" + std::to_string(code) + "}\n");
  std::printf("\nExit code %d (%s).\n", code, exit_text(code));
  return code;
}

int parent_main(int argc, char** argv) {
  Options o;
  std::optional<int> processes, managers, idle_s, waiters, pairs_s;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      quick = true;
    } else if (a == "--restart") {
      o.restart = true;
    } else if (a == "--no-restart") {
      o.restart = false;
    } else if (a == "--cluster") {
      o.cluster = true;
    } else if (a == "--processes" && has_value) {
      processes = std::atoi(argv[++i]);
    } else if (a == "--managers" && has_value) {
      managers = std::atoi(argv[++i]);
    } else if (a == "--idle-seconds" && has_value) {
      idle_s = std::atoi(argv[++i]);
    } else if (a == "--waiters" && has_value) {
      waiters = std::atoi(argv[++i]);
    } else if (a == "--pairs-seconds" && has_value) {
      pairs_s = std::atoi(argv[++i]);
    } else if (a == "--port" && has_value) {
      o.port = static_cast<std::uint16_t>(std::atoi(argv[++i]));
    } else if (a == "--sizes" && has_value) {
      for (const auto& n : split(argv[++i], ',')) {
        const int size = std::atoi(n.c_str());
        if (size < 1) return usage();
        o.sizes.push_back(size);
      }
    } else if (a == "--json" && has_value) {
      o.json = argv[++i];
    } else {
      return usage();
    }
  }
  if (quick) {
    o.processes = 2;
    o.managers = 100;
    o.idle_s = 10;
    o.waiters = 100;
    o.pairs_s = 3;
  }
  if (!o.sizes.empty()) o.processes = 4;  // the sweep: P = 4, M = size / 4
  o.processes = processes.value_or(o.processes);
  o.managers = managers.value_or(o.managers);
  o.idle_s = idle_s.value_or(o.idle_s);
  o.waiters = waiters.value_or(o.waiters);
  o.pairs_s = pairs_s.value_or(o.pairs_s);
  if (o.processes < 1 || o.managers < 1 || o.idle_s < 0 || o.waiters < 0 || o.pairs_s < 1) {
    return usage();
  }
  // A Cluster and the sweep start their own servers; the sweep restarts them.
  if (o.cluster && (o.port != 0 || !o.sizes.empty())) return usage();
  if (!o.sizes.empty() && o.port != 0) return usage();

  ::signal(SIGPIPE, SIG_IGN);
  const rlim_t fd_limit = raise_fd_limit();

  try {
    if (!o.sizes.empty()) return run_sweep(o, fd_limit);
    const auto r = run_fleet(o, fd_limit);
    if (!r.json.empty()) write_json(o.json, r.json + "\n");
    std::printf("\nExit code %d (%s).\n", r.code, exit_text(r.code));
    return r.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fleet_bench: %s\n", e.what());
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--child") return child_main(argc, argv);
  }
  return parent_main(argc, argv);
}

// SPDX-License-Identifier: MIT
// One program, every workload, one table — each figure beside a raw hiredis baseline doing the
// same server-side work (the library's own scripts and keys, a fresh token per acquisition)
// in the same run, against the same server:
//   (a) latency     one acquire+release at a time: p50/p99
//   (b) throughput  1, 8, 64, 256 acquire+release chains in flight on one LockManager
//                   (the baseline pipelines batches of as many on one hiredis context)
//   (c) hand-off    2, 8, 64 waiters (one LockManager each, as processes would have) want one
//                   resource; each holds it --hold-ms and may not ask again until someone else
//                   has had it: the gap from a release being issued to the next owner's
//                   acquire completing, and client commands per acquisition (SLOWLOG at
//                   threshold 0, script-internal entries left out); baseline: one raw pair
//   (d) held     1k, 10k, 100k auto-renewed locks held by one manager: client CPU over a
//                renewal period (share of a core, per renewal; baseline: raw hiredis sending
//                the same extension script in batches of 1000), Redis commands per second,
//   (e)          heap and RSS per held lock, and (growth) acquire+release p50 while they
//                are held, next to p50 with none held.
//
//   lock_bench --port P [--quick] [--hold-ms 1] [--json FILE]
#include <redis_lock/redis_lock.hpp>

#include "keys.hpp"
#include "raw_redis.hpp"
#include "redis_lock_scripts.hpp"
#include "token.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <hiredis/hiredis.h>

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace detail = redis_lock::detail;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct Args {
  std::uint16_t port = 6379;
  bool quick = false;
  bool probe = false;  // only the raw baseline, for runs of other programs to be scaled by
  bool ceiling_only = false;  // only (f), the server ceiling by command shape
  int hold_ms = 1;
  std::string json;
};

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// ------------------------------------------------------------------------ raw baseline

/// The library's scripts with the library's arguments, on a blocking hiredis context.
class Raw {
 public:
  explicit Raw(std::uint16_t port) : c_(bench::connect_or_exit(port)) {
    for (const auto* s : {&detail::acquire_script, &detail::release_script}) {
      bench::command(c_, {"SCRIPT", "LOAD", std::string(s->body)});
    }
  }
  ~Raw() { redisFree(c_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  void append_acquire(const detail::ResourceKeys& k, const std::string& token) {
    append({"EVALSHA", std::string(detail::acquire_script.sha1), "4", k.lease, k.fence, k.queue,
            k.queue_expiry, token, "10000", "0", "2000", suffix_});
  }
  void append_release(const detail::ResourceKeys& k, const std::string& token) {
    append({"EVALSHA", std::string(detail::release_script.sha1), "3", k.lease, k.queue,
            k.queue_expiry, token, "lock:notify:", "1000", token + suffix_, "PUBLISH"});
  }
  /// Reads one reply; an error reply means the baseline is not doing the work: stop.
  void expect_reply() {
    void* reply = nullptr;
    if (redisGetReply(c_, &reply) != REDIS_OK || reply == nullptr) std::exit(1);
    auto* r = static_cast<redisReply*>(reply);
    if (r->type == REDIS_REPLY_ERROR) {
      std::fprintf(stderr, "baseline got an error reply: %.*s\n", static_cast<int>(r->len), r->str);
      std::exit(1);
    }
    freeReplyObject(r);
  }
  /// Loads a script; returns its SHA1.
  std::string load(const std::string& body) { return bench::command(c_, {"SCRIPT", "LOAD", body}); }
  redisContext* context() const noexcept { return c_; }
  void append(std::vector<std::string> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data());
  }

 private:
  redisContext* c_;
  const std::string suffix_ = "0123456789abcdef";
};

Percentiles raw_latency(const Args& a, int pairs) {
  Raw raw(a.port);
  const auto keys = detail::make_keys("lock:", "bench:raw:seq");
  std::vector<double> us;
  for (int i = 0; i < pairs; ++i) {
    const auto t0 = Clock::now();
    const auto token = detail::random_token();
    raw.append_acquire(keys, token);
    raw.expect_reply();
    raw.append_release(keys, token);
    raw.expect_reply();
    us.push_back(micros(Clock::now() - t0));
  }
  return percentiles(us);
}

using AppendFor = std::function<void(const detail::ResourceKeys&, const std::string&)>;

struct Batches {
  long pairs = 0;
  double seconds = 0;
  double per_second() const { return static_cast<double>(pairs) / seconds; }
};

/// Pipelined batches for `seconds`: `in_flight` acquires on distinct keys (a fresh token
/// each), their replies, then their releases and replies.
Batches batch_pairs(Raw& raw, const std::string& key_stem, int in_flight, double seconds,
                   const AppendFor& acquire, const AppendFor& release) {
  std::vector<detail::ResourceKeys> keys;
  for (int i = 0; i < in_flight; ++i) {
    keys.push_back(detail::make_keys("lock:", key_stem + std::to_string(i)));
  }
  std::vector<std::string> tokens(static_cast<std::size_t>(in_flight));
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    for (int i = 0; i < in_flight; ++i) {
      tokens[i] = detail::random_token();
      acquire(keys[i], tokens[i]);
    }
    for (int i = 0; i < in_flight; ++i) raw.expect_reply();
    for (int i = 0; i < in_flight; ++i) release(keys[i], tokens[i]);
    for (int i = 0; i < in_flight; ++i) raw.expect_reply();
    pairs += in_flight;
  }
  return {pairs, std::chrono::duration<double>(Clock::now() - start).count()};
}

double raw_throughput(const Args& a, int in_flight, double seconds) {
  Raw raw(a.port);
  return batch_pairs(
      raw, "bench:raw:tp:", in_flight, seconds,
      [&](const auto& k, const auto& t) { raw.append_acquire(k, t); },
      [&](const auto& k, const auto& t) { raw.append_release(k, t); })
      .per_second();
}

// ------------------------------------------------------------------------ server ceiling

/// What one acquire + release costs the server, for each library's command shape: driven
/// from C with 256 pairs in flight (batches of acquires, then their releases) so that the
/// client is not the limit. Pairs per second, and the server's own CPU per pair (INFO cpu).
struct Shape {
  std::string name;   // whose shape
  std::string sends;  // what one pair sends
  double pairs_per_s = 0;
  double server_us_per_pair = 0;
};

double server_cpu_seconds(redisContext* c) {
  const auto info = bench::command(c, {"INFO", "cpu"});
  double total = 0;
  for (const char* field : {"used_cpu_sys:", "used_cpu_user:"}) {
    const auto at = info.find(field);
    if (at != std::string::npos) total += std::atof(info.c_str() + at + std::strlen(field));
  }
  return total;
}

// Our own minimal scripts with the peers' command shapes (what each sends per pair).
constexpr const char* check_and_set_lua =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\nreturn 1\n";
constexpr const char* compare_and_delete_lua =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "return redis.call('DEL', KEYS[1])\n";

std::vector<Shape> server_ceiling(const Args& a, int rounds, double seconds) {
  constexpr int in_flight = 256;
  Raw raw(a.port);
  const auto cas = raw.load(check_and_set_lua);
  const auto cad = raw.load(compare_and_delete_lua);
  const auto noop = raw.load("return 1");
  struct Kind {
    Shape shape;
    AppendFor acquire, release;
  };
  const auto set_nx = [&](const detail::ResourceKeys& k, const std::string& t) {
    raw.append({"SET", k.lease, t, "NX", "PX", "10000"});
  };
  const auto compare_delete = [&](const detail::ResourceKeys& k, const std::string& t) {
    raw.append({"EVALSHA", cad, "1", k.lease, t});
  };
  std::vector<Kind> kinds = {
      {{"redis_lock", "acquire.lua (EXISTS queue, SET NX PX, INCR fence, TIME, SET fence) + "
                      "release.lua (EXISTS queue, GET, DEL)"},
       [&](const auto& k, const auto& t) { raw.append_acquire(k, t); },
       [&](const auto& k, const auto& t) { raw.append_release(k, t); }},
      {{"npm redlock (one master)", "script (EXISTS, SET PX) + script (GET, DEL)"},
       [&](const auto& k, const auto& t) {
         raw.append({"EVALSHA", cas, "1", k.lease, t, "10000"});
       },
       compare_delete},
      {{"redis-semaphore Mutex, redis-py Lock", "SET NX PX + script (GET, DEL)"}, set_nx,
       compare_delete},
      {{"redis_lock's call overhead alone",
        "its two script calls with their keys and arguments, scripts that only return 1"},
       [&](const auto& k, const auto& t) {
         raw.append({"EVALSHA", noop, "4", k.lease, k.fence, k.queue, k.queue_expiry, t, "10000",
                     "0", "2000", "0123456789abcdef"});
       },
       [&](const auto& k, const auto& t) {
         raw.append({"EVALSHA", noop, "3", k.lease, k.queue, k.queue_expiry, t, "lock:notify:",
                     "1000", t + "0123456789abcdef", "PUBLISH"});
       }},
      {{"floor: no ownership check", "SET NX PX + DEL (not a safe lock)"}, set_nx,
       [&](const auto& k, const auto&) { raw.append({"DEL", k.lease}); }},
  };
  std::vector<detail::ResourceKeys> keys;
  std::vector<std::vector<Shape>> runs(kinds.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t s = 0; s < kinds.size(); ++s) {
      auto& kind = kinds[s];
      const double cpu0 = server_cpu_seconds(raw.context());
      const auto run =
          batch_pairs(raw, "bench:ceiling:", in_flight, seconds, kind.acquire, kind.release);
      const double cpu = server_cpu_seconds(raw.context()) - cpu0;
      Shape shape = kind.shape;
      shape.pairs_per_s = run.per_second();
      shape.server_us_per_pair = cpu * 1e6 / static_cast<double>(run.pairs);
      runs[s].push_back(shape);
    }
  }
  std::vector<Shape> out;
  for (auto& run : runs) {
    std::sort(run.begin(), run.end(),
              [](const Shape& x, const Shape& y) { return x.pairs_per_s < y.pairs_per_s; });
    out.push_back(run[run.size() / 2]);
  }
  return out;
}

// ------------------------------------------------------------------------ redis_lock

redis_lock::ConnectionConfig config(const Args& a) {
  redis_lock::ConnectionConfig cfg;
  cfg.port = a.port;
  return cfg;
}

Percentiles lib_latency(const Args& a, int pairs) {
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  std::vector<double> us;
  int left = pairs;
  Clock::time_point t0;
  std::function<void()> next = [&] {
    t0 = Clock::now();
    locks.async_acquire("bench:lib:seq", {.ttl = 10s},
                        [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                          if (ec || !g) std::exit(1);
                          g.async_release([&](boost::system::error_code ec2, bool) {
                            if (ec2) std::exit(1);
                            us.push_back(micros(Clock::now() - t0));
                            if (--left > 0) next();
                          });
                        });
  };
  next();
  io.run();
  return percentiles(us);
}

double lib_throughput(const Args& a, int in_flight, double seconds) {
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<std::string> names;
  for (int i = 0; i < in_flight; ++i) names.push_back("bench:lib:tp:" + std::to_string(i));
  std::function<void(int)> chain = [&](int slot) {
    locks.async_acquire(names[slot], {.ttl = 10s},
                        [&, slot](boost::system::error_code ec, redis_lock::LockGuard g) {
                          if (ec || !g) std::exit(1);
                          g.async_release([&, slot](boost::system::error_code ec2, bool) {
                            if (ec2) std::exit(1);
                            ++pairs;
                            if (Clock::now() < until) chain(slot);
                          });
                        });
  };
  for (int i = 0; i < in_flight; ++i) chain(i);
  io.run();
  return static_cast<double>(pairs) / std::chrono::duration<double>(Clock::now() - start).count();
}

/// Client commands since the last SLOWLOG RESET at threshold 0, without script internals
/// (Redis 7 logs them as client "?:0") and without this program's SLOWLOG/CONFIG calls.
long client_commands(redisContext* c) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "SLOWLOG GET -1"));
  long n = 0;
  for (std::size_t i = 0; r != nullptr && r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 5) continue;
    const redisReply* argv = e->element[3];
    const std::string addr(e->element[4]->str ? e->element[4]->str : "", e->element[4]->len);
    if (addr == "?:0" || argv->type != REDIS_REPLY_ARRAY || argv->elements == 0) continue;
    std::string name(argv->element[0]->str, argv->element[0]->len);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    if (name != "slowlog" && name != "config") ++n;
  }
  if (r != nullptr) freeReplyObject(r);
  return n;
}

struct Handoff {
  int waiters = 0, acquisitions = 0;
  Percentiles gap;
  double commands_per_acquisition = 0;
};

Handoff lib_handoff(const Args& a, int waiters, int handoffs) {
  redisContext* admin = bench::connect_or_exit(a.port);
  bench::command(admin, {"CONFIG", "SET", "slowlog-max-len", "10000000"});
  bench::command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  bench::command(admin, {"SLOWLOG", "RESET"});

  asio::io_context io(1);
  std::vector<std::unique_ptr<redis_lock::LockManager>> managers;
  for (int i = 0; i < waiters; ++i) {
    managers.push_back(std::make_unique<redis_lock::LockManager>(io.get_executor(), config(a)));
  }
  const std::string resource = "bench:handoff:" + std::to_string(waiters) + ":" +
                               detail::random_token().substr(0, 8);
  std::vector<double> gaps;
  int acquisitions = 0, last_owner = -1;
  Clock::time_point released_at{};
  std::vector<bool> parked(static_cast<std::size_t>(waiters), false);
  std::function<void(int)> want;
  const auto unpark_others = [&](int owner) {
    for (int i = 0; i < waiters; ++i) {
      if (i != owner && parked[i]) {
        parked[i] = false;
        want(i);
      }
    }
  };
  want = [&](int i) {
    managers[i]->async_acquire(
        resource, {.ttl = 10s, .wait = 60s},
        [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
          if (ec || !g) std::exit(1);
          if (last_owner >= 0) gaps.push_back(micros(Clock::now() - released_at));
          last_owner = i;
          ++acquisitions;
          unpark_others(i);
          auto guard = std::make_shared<redis_lock::LockGuard>(std::move(g));
          auto hold = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(a.hold_ms));
          hold->async_wait([&, i, guard, hold](boost::system::error_code) {
            released_at = Clock::now();
            guard->async_release([&, i, guard](boost::system::error_code, bool) {
              if (acquisitions >= handoffs) return;
              parked[i] = true;  // may ask again once someone else has had it
              if (last_owner != i) unpark_others(last_owner);
            });
          });
        });
  };
  for (int i = 0; i < waiters; ++i) want(i);
  io.run();
  Handoff h;
  h.waiters = waiters;
  h.acquisitions = acquisitions;
  h.gap = percentiles(gaps);
  bench::command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  h.commands_per_acquisition = static_cast<double>(client_commands(admin)) / acquisitions;
  bench::command(admin, {"CONFIG", "SET", "slowlog-max-len", "128"});
  bench::command(admin, {"SLOWLOG", "RESET"});
  redisFree(admin);
  return h;
}

// ------------------------------------------------------------------------ held locks

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

long rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

long evalsha_calls(redisContext* c) {
  const auto info = bench::command(c, {"INFO", "commandstats"});
  const auto at = info.find("cmdstat_evalsha:calls=");
  return at == std::string::npos ? 0 : std::atol(info.c_str() + at + 22);
}

/// CPU of a raw client renewing `n` leases once: the same extension script, pipelined in
/// batches of 1000 (the leases are set up first, outside the measurement).
double raw_renewal_cpu_us(const Args& a, int n) {
  redisContext* c = bench::connect_or_exit(a.port);
  bench::command(c, {"SCRIPT", "LOAD", std::string(detail::extend_script.body)});
  std::vector<detail::ResourceKeys> keys;
  std::vector<std::string> tokens;
  for (int i = 0; i < n; ++i) {
    keys.push_back(detail::make_keys("lock:", "bench:raw:held:" + std::to_string(i)));
    tokens.push_back(detail::random_token());
    redisAppendCommand(c, "SET %s %s PX 60000", keys.back().lease.c_str(), tokens.back().c_str());
  }
  for (int i = 0; i < n; ++i) {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK) std::exit(1);
    freeReplyObject(r);
  }
  const std::string sha(detail::extend_script.sha1);
  const double t0 = cpu_seconds();
  for (int from = 0; from < n; from += 1000) {
    const int to = std::min(n, from + 1000);
    for (int i = from; i < to; ++i) {
      const char* argv[] = {"EVALSHA", sha.c_str(), "1", keys[i].lease.c_str(), tokens[i].c_str(),
                            "30000"};
      const std::size_t lens[] = {7, sha.size(), 1, keys[i].lease.size(), tokens[i].size(), 5};
      redisAppendCommandArgv(c, 6, argv, lens);
    }
    for (int i = from; i < to; ++i) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK) std::exit(1);
      if (static_cast<redisReply*>(r)->type != REDIS_REPLY_INTEGER) std::exit(1);
      freeReplyObject(r);
    }
  }
  const double us = (cpu_seconds() - t0) * 1e6 / n;
  for (int i = 0; i < n; ++i) redisAppendCommand(c, "DEL %s", keys[i].lease.c_str());
  for (int i = 0; i < n; ++i) {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK) std::exit(1);
    freeReplyObject(r);
  }
  redisFree(c);
  return us;
}

struct Held {
  int locks = 0;
  double cpu_share = 0, cpu_us_per_renewal = 0, raw_cpu_us_per_renewal = 0;
  double commands_per_s = 0, heap_bytes_per_lock = 0, rss_bytes_per_lock = 0;
  double latency_p50_us = 0, latency_p50_none_us = 0;
  long renewals = 0, lost = 0;
};

Held held_locks(const Args& a, int n) {
  const auto ttl = a.quick ? 3s : 30s;
  const auto window = a.quick ? 2100ms : 10500ms;  // a little over one renewal period
  Held h;
  h.locks = n;
  h.raw_cpu_us_per_renewal = raw_renewal_cpu_us(a, n);
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  const auto p50_now = [&] {
    // Uncontended acquire+release pairs on another resource while the held ones renew.
    std::vector<double> us;
    std::function<void()> next = [&] {
      if (us.size() >= 500) return;
      const auto t0 = Clock::now();
      locks.async_acquire("bench:held:probe", {.ttl = 10s},
                          [&, t0](boost::system::error_code ec, redis_lock::LockGuard g) {
                            if (ec || !g) std::exit(1);
                            g.async_release([&, t0](boost::system::error_code, bool) {
                              us.push_back(micros(Clock::now() - t0));
                              next();
                            });
                          });
    };
    next();
    while (us.size() < 500) io.run_one();
    return percentiles(us).p50;
  };
  h.latency_p50_none_us = p50_now();

  const auto heap0 = mallinfo2().uordblks;
  const auto rss0 = rss_bytes();
  std::vector<redis_lock::LockGuard> held;
  held.reserve(static_cast<std::size_t>(n));
  const std::string prefix = "bench:held:" + std::to_string(n) + ":" + detail::random_token().substr(0, 6) + ":";
  int pending = 0, started = 0;
  std::function<void()> more = [&] {
    while (pending < 256 && started < n) {  // bounded in flight, like a real service
      ++pending;
      locks.async_acquire(prefix + std::to_string(started++), {.ttl = ttl, .auto_renew = true},
                          [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                            if (ec || !g) std::exit(1);
                            held.push_back(std::move(g));
                            --pending;
                            more();
                          });
    }
  };
  more();
  while (static_cast<int>(held.size()) < n) io.run_one();
  h.heap_bytes_per_lock = static_cast<double>(mallinfo2().uordblks - heap0) / n;
  h.rss_bytes_per_lock = static_cast<double>(rss_bytes() - rss0) / n;

  redisContext* admin = bench::connect_or_exit(a.port);
  const long calls0 = evalsha_calls(admin);
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  io.run_for(window);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const long calls = evalsha_calls(admin) - calls0 - 1;  // INFO itself is not an EVALSHA
  redisFree(admin);
  h.renewals = std::max(calls, 1L);
  h.cpu_share = cpu / wall;
  h.cpu_us_per_renewal = cpu * 1e6 / static_cast<double>(h.renewals);
  h.commands_per_s = static_cast<double>(calls) / wall;
  for (const auto& g : held) h.lost += g.lost();
  h.latency_p50_us = p50_now();
  held.clear();  // the destructors post the releases
  io.run();
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--quick") {
      a.quick = true;
    } else if (k == "--probe") {
      a.probe = true;
    } else if (k == "--ceiling") {
      a.ceiling_only = true;
    } else if (k == "--port") {
      a.port = static_cast<std::uint16_t>(std::atoi(v)), ++i;
    } else if (k == "--hold-ms") {
      a.hold_ms = std::atoi(v), ++i;
    } else if (k == "--json") {
      a.json = v, ++i;
    } else {
      std::fprintf(stderr,
                   "usage: lock_bench --port P [--quick] [--hold-ms 1] [--json FILE]\n"
                   "       lock_bench --port P --probe   (raw baseline only, as JSON)\n"
                   "       lock_bench --port P --ceiling [--quick]   (only (f))\n");
      return 2;
    }
  }
  if (a.probe) {
    // The loopback round trip of a VM drifts for minutes at a time: programs measured one
    // after the other are compared through the raw baseline measured right before them.
    const auto lat = raw_latency(a, 2000);
    const auto tp = raw_throughput(a, 64, 1.0);
    std::printf("{\"raw_p50_us\":%.3f,\"raw_p99_us\":%.3f,\"raw_pairs_per_s_64\":%.1f}\n", lat.p50,
                lat.p99, tp);
    return 0;
  }
  if (a.ceiling_only) {
    for (const auto& c : server_ceiling(a, 3, a.quick ? 0.3 : 1.5)) {
      std::printf("%-40s %10.0f pairs/s %8.2f server us/pair   %s\n", c.name.c_str(),
                  c.pairs_per_s, c.server_us_per_pair, c.sends.c_str());
    }
    return 0;
  }
  const int pairs = a.quick ? 2000 : 20000;
  const double seconds = a.quick ? 0.5 : 2.0;
  const int handoffs = a.quick ? 200 : 1000;

  // (a) alternate raw and library three times; report the median run of each.
  std::vector<Percentiles> raw_runs, lib_runs;
  for (int r = 0; r < 3; ++r) {
    raw_runs.push_back(raw_latency(a, pairs));
    lib_runs.push_back(lib_latency(a, pairs));
  }
  const auto by_p50 = [](const Percentiles& x, const Percentiles& y) { return x.p50 < y.p50; };
  std::sort(raw_runs.begin(), raw_runs.end(), by_p50);
  std::sort(lib_runs.begin(), lib_runs.end(), by_p50);
  const auto raw_lat = raw_runs[1], lib_lat = lib_runs[1];

  struct Tp {
    int in_flight;
    double raw, lib;
  };
  std::vector<Tp> tps;
  for (int n : {1, 8, 64, 256}) {
    std::vector<double> raw_v, lib_v;
    for (int r = 0; r < 3; ++r) {
      raw_v.push_back(raw_throughput(a, n, seconds));
      lib_v.push_back(lib_throughput(a, n, seconds));
    }
    std::sort(raw_v.begin(), raw_v.end());
    std::sort(lib_v.begin(), lib_v.end());
    tps.push_back({n, raw_v[1], lib_v[1]});
  }
  const auto ceiling = server_ceiling(a, 3, a.quick ? 0.3 : 1.5);
  std::vector<Handoff> handoff_runs;
  for (int w : {2, 4, 8, 16, 32, 64}) handoff_runs.push_back(lib_handoff(a, w, handoffs));
  std::vector<Held> held_runs;
  for (int n : {1'000, 10'000, 100'000}) held_runs.push_back(held_locks(a, n));

  std::printf("redis_lock %s vs raw hiredis (same scripts, same server, same run)\n\n",
              REDIS_LOCK_VERSION_STRING);
  std::printf("%-44s %12s %12s %8s\n", "workload", "raw", "redis_lock", "ratio");
  std::printf("%-44s %12.1f %12.1f %7.2fx\n", "(a) latency p50, us per acquire+release",
              raw_lat.p50, lib_lat.p50, lib_lat.p50 / raw_lat.p50);
  std::printf("%-44s %12.1f %12.1f %7.2fx\n", "(a) latency p99, us", raw_lat.p99, lib_lat.p99,
              lib_lat.p99 / raw_lat.p99);
  for (const auto& t : tps) {
    char label[64];
    std::snprintf(label, sizeof label, "(b) throughput, pairs/s, %d in flight", t.in_flight);
    std::printf("%-44s %12.0f %12.0f %7.2fx\n", label, t.raw, t.lib, t.lib / t.raw);
  }
  std::printf("\n(f) the server ceiling by command shape (256 in flight, driven from C)\n");
  std::printf("%-40s %12s %20s\n", "shape", "pairs/s", "server CPU us/pair");
  for (const auto& c : ceiling) {
    std::printf("%-40s %12.0f %20.2f\n", c.name.c_str(), c.pairs_per_s, c.server_us_per_pair);
  }
  std::printf("\n");
  for (const auto& h : handoff_runs) {
    char label[64];
    std::snprintf(label, sizeof label, "(c) hand-off gap p50, us, %d waiters", h.waiters);
    std::printf("%-44s %12.1f %12.1f %7.2fx\n", label, raw_lat.p50, h.gap.p50,
                h.gap.p50 / raw_lat.p50);
    std::snprintf(label, sizeof label, "    gap p99 / commands per acquisition");
    std::printf("%-44s %12s %12.1f %8.2f\n", label, "", h.gap.p99, h.commands_per_acquisition);
  }
  for (const auto& h : held_runs) {
    char label[64];
    std::snprintf(label, sizeof label, "(d) %d held: CPU us per renewal", h.locks);
    std::printf("%-44s %12.2f %12.2f %7.2fx\n", label, h.raw_cpu_us_per_renewal,
                h.cpu_us_per_renewal, h.cpu_us_per_renewal / h.raw_cpu_us_per_renewal);
    std::printf("%-44s %12s %11.2f%% %8s\n", "    share of one core", "", h.cpu_share * 100, "");
    std::printf("%-44s %12s %12.0f %8s\n", "    Redis commands per second", "", h.commands_per_s, "");
    std::printf("%-44s %12s %12.0f %8s\n", "(e) heap bytes per held lock", "",
                h.heap_bytes_per_lock, "");
    std::printf("%-44s %12s %12.0f %8s\n", "    RSS bytes per held lock", "", h.rss_bytes_per_lock,
                "");
    std::printf("%-44s %12.1f %12.1f %7.2fx\n", "    latency p50 none held -> held, us",
                h.latency_p50_none_us, h.latency_p50_us, h.latency_p50_us / h.latency_p50_none_us);
    if (h.lost) std::printf("    LOST LEASES: %ld\n", h.lost);
  }

  if (!a.json.empty()) {
    FILE* f = std::fopen(a.json.c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "{\"library\":\"redis_lock\",\"version\":\"%s\",\"runtime\":\"C++ (Asio)\",",
                 REDIS_LOCK_VERSION_STRING);
    std::fprintf(f, "\"latency\":{\"pairs\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
                    "\"raw_p50_us\":%.3f,\"raw_p99_us\":%.3f},",
                 pairs, lib_lat.p50, lib_lat.p99, raw_lat.p50, raw_lat.p99);
    std::fprintf(f, "\"throughput\":[");
    for (std::size_t i = 0; i < tps.size(); ++i) {
      std::fprintf(f, "%s{\"in_flight\":%d,\"pairs_per_s\":%.1f,\"raw_pairs_per_s\":%.1f}",
                   i ? "," : "", tps[i].in_flight, tps[i].lib, tps[i].raw);
    }
    std::fprintf(f, "],\"server_ceiling\":[");
    for (std::size_t i = 0; i < ceiling.size(); ++i) {
      const auto& c = ceiling[i];
      std::fprintf(f, "%s{\"shape\":\"%s\",\"sends\":\"%s\",\"in_flight\":256,"
                      "\"pairs_per_s\":%.1f,\"server_us_per_pair\":%.3f}",
                   i ? "," : "", c.name.c_str(), c.sends.c_str(), c.pairs_per_s,
                   c.server_us_per_pair);
    }
    std::fprintf(f, "],\"handoff\":[");
    for (std::size_t i = 0; i < handoff_runs.size(); ++i) {
      const auto& h = handoff_runs[i];
      std::fprintf(f, "%s{\"waiters\":%d,\"handoffs\":%d,\"gap_p50_us\":%.3f,\"gap_p99_us\":%.3f,"
                      "\"commands_per_acquisition\":%.3f,\"raw_pair_p50_us\":%.3f}",
                   i ? "," : "", h.waiters, h.acquisitions, h.gap.p50, h.gap.p99,
                   h.commands_per_acquisition, raw_lat.p50);
    }
    std::fprintf(f, "],\"held\":[");
    for (std::size_t i = 0; i < held_runs.size(); ++i) {
      const auto& h = held_runs[i];
      std::fprintf(f, "%s{\"locks\":%d,\"cpu_share\":%.5f,\"cpu_us_per_renewal\":%.3f,"
                      "\"raw_cpu_us_per_renewal\":%.3f,\"commands_per_s\":%.1f,"
                      "\"heap_bytes_per_lock\":%.1f,\"rss_bytes_per_lock\":%.1f,"
                      "\"latency_p50_us\":%.3f,\"latency_p50_none_us\":%.3f,\"lost\":%ld}",
                   i ? "," : "", h.locks, h.cpu_share, h.cpu_us_per_renewal,
                   h.raw_cpu_us_per_renewal, h.commands_per_s, h.heap_bytes_per_lock,
                   h.rss_bytes_per_lock, h.latency_p50_us, h.latency_p50_none_us, h.lost);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}

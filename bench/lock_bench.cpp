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
// Renewal cost and memory per held lock: bench/renewal_bench.
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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
            k.queue_expiry, token, "lock:notify:", "1000", token + suffix_});
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

 private:
  void append(std::vector<std::string> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
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

double raw_throughput(const Args& a, int in_flight, double seconds) {
  Raw raw(a.port);
  std::vector<detail::ResourceKeys> keys;
  for (int i = 0; i < in_flight; ++i) {
    keys.push_back(detail::make_keys("lock:", "bench:raw:tp:" + std::to_string(i)));
  }
  std::vector<std::string> tokens(static_cast<std::size_t>(in_flight));
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    for (int i = 0; i < in_flight; ++i) {
      tokens[i] = detail::random_token();
      raw.append_acquire(keys[i], tokens[i]);
    }
    for (int i = 0; i < in_flight; ++i) raw.expect_reply();
    for (int i = 0; i < in_flight; ++i) raw.append_release(keys[i], tokens[i]);
    for (int i = 0; i < in_flight; ++i) raw.expect_reply();
    pairs += in_flight;
  }
  return static_cast<double>(pairs) / std::chrono::duration<double>(Clock::now() - start).count();
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
    } else if (k == "--port") {
      a.port = static_cast<std::uint16_t>(std::atoi(v)), ++i;
    } else if (k == "--hold-ms") {
      a.hold_ms = std::atoi(v), ++i;
    } else if (k == "--json") {
      a.json = v, ++i;
    } else {
      std::fprintf(stderr,
                   "usage: lock_bench --port P [--quick] [--hold-ms 1] [--json FILE]\n"
                   "       lock_bench --port P --probe   (raw baseline only, as JSON)\n");
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
  std::vector<Handoff> handoff_runs;
  for (int w : {2, 8, 64}) handoff_runs.push_back(lib_handoff(a, w, handoffs));

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
  for (const auto& h : handoff_runs) {
    char label[64];
    std::snprintf(label, sizeof label, "(c) hand-off gap p50, us, %d waiters", h.waiters);
    std::printf("%-44s %12.1f %12.1f %7.2fx\n", label, raw_lat.p50, h.gap.p50,
                h.gap.p50 / raw_lat.p50);
    std::snprintf(label, sizeof label, "    gap p99 / commands per acquisition");
    std::printf("%-44s %12s %12.1f %8.2f\n", label, "", h.gap.p99, h.commands_per_acquisition);
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
    std::fprintf(f, "],\"handoff\":[");
    for (std::size_t i = 0; i < handoff_runs.size(); ++i) {
      const auto& h = handoff_runs[i];
      std::fprintf(f, "%s{\"waiters\":%d,\"handoffs\":%d,\"gap_p50_us\":%.3f,\"gap_p99_us\":%.3f,"
                      "\"commands_per_acquisition\":%.3f,\"raw_pair_p50_us\":%.3f}",
                   i ? "," : "", h.waiters, h.acquisitions, h.gap.p50, h.gap.p99,
                   h.commands_per_acquisition, raw_lat.p50);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}

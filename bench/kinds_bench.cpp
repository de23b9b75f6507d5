// SPDX-License-Identifier: MIT
// What the other kinds of lock cost, each beside redis_lock's mutex measured in the same
// process, on the same server, in the same rounds (the order alternates; ratios are taken
// within a round, and the table gives their median and range):
//   (a) latency      one acquire+release at a time: p50/p99 of a mutex, a semaphore's
//                    permit (limit 1000: never contended), a shared and an exclusive hold
//   (b) throughput   1, 8, 64 acquire+release chains in flight on one LockManager (each on a
//                    resource of its own), pairs/s, mutex vs permit vs shared
//   (c) server CPU   per acquire+release pair of each kind (INFO cpu over a run at 64 in
//                    flight)
//   (d) hand-off     a semaphore of 1 permit and a mutex, 2 and 8 waiters (a LockManager
//                    each), each holding --hold-ms: the gap from a release being issued to the
//                    next holder's acquire completing, p50/p99
// Every acquire must be granted and every release return true, or the program stops.
//
//   kinds_bench --port P [--quick] [--hold-ms 1] [--json FILE]
#include <redis_lock/redis_lock.hpp>

#include "raw_redis.hpp"
#include "stats.hpp"

#include <hiredis/hiredis.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using bench::Spread;

namespace {

struct Args {
  std::uint16_t port = 6379;
  bool quick = false;
  int hold_ms = 1;
  std::string json;
  std::string stem;
};

enum class Kind { mutex, permit, shared, exclusive };
constexpr const char* kind_name(Kind k) {
  switch (k) {
    case Kind::mutex:
      return "mutex";
    case Kind::permit:
      return "permit";
    case Kind::shared:
      return "shared";
    case Kind::exclusive:
      return "exclusive";
  }
  return "?";
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "kinds_bench: %s\n", what.c_str());
  std::exit(1);
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Percentiles {
  double p50 = 0, p99 = 0;
};
Percentiles percentiles(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

redis_lock::ConnectionConfig config(const Args& a) {
  redis_lock::ConnectionConfig cfg;
  cfg.port = a.port;
  return cfg;
}

/// Starts one acquire of `kind` (a semaphore of `limit`).
void acquire(redis_lock::LockManager& locks, Kind kind, const std::string& resource,
             redis_lock::LockOptions options, std::uint32_t limit,
             std::function<void(boost::system::error_code, redis_lock::LockGuard)> done) {
  switch (kind) {
    case Kind::mutex:
      return locks.async_acquire(resource, options, std::move(done));
    case Kind::permit:
      return locks.async_acquire_permit(resource, limit, options, std::move(done));
    case Kind::shared:
      return locks.async_acquire_shared(resource, options, std::move(done));
    case Kind::exclusive:
      return locks.async_acquire_exclusive(resource, options, std::move(done));
  }
}

void check(boost::system::error_code ec, const redis_lock::LockGuard& g, const char* what) {
  if (ec || !g || g.fencing_token() == 0) fail(std::string(what) + " acquire: " + ec.message());
}

/// `in_flight` chains of acquire+release of `kind`, each on a resource of its own, for
/// `seconds`; returns pairs per second. (in_flight 1 also gives the latency samples.)
double chains(const Args& a, Kind kind, int in_flight, double seconds,
              std::vector<double>* latencies = nullptr) {
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<std::string> names;
  for (int i = 0; i < in_flight; ++i) {
    names.push_back(a.stem + kind_name(kind) + ":" + std::to_string(in_flight) + ":" +
                    std::to_string(i));
  }
  std::function<void(int)> chain = [&](int slot) {
    const auto t0 = Clock::now();
    acquire(locks, kind, names[slot], {.ttl = 10s}, 1000,
            [&, slot, t0](boost::system::error_code ec, redis_lock::LockGuard g) {
              check(ec, g, kind_name(kind));
              g.async_release([&, slot, t0](boost::system::error_code ec2, bool released) {
                if (ec2 || !released) fail("release: " + ec2.message());
                if (latencies) latencies->push_back(micros(Clock::now() - t0));
                ++pairs;
                if (Clock::now() < until) chain(slot);
              });
            });
  };
  for (int i = 0; i < in_flight; ++i) chain(i);
  io.run();
  return static_cast<double>(pairs) / std::chrono::duration<double>(Clock::now() - start).count();
}

double server_cpu_seconds(redisContext* c) {
  const auto info = bench::command(c, {"INFO", "cpu"});
  double total = 0;
  for (const char* field : {"used_cpu_sys:", "used_cpu_user:"}) {
    const auto at = info.find(field);
    if (at != std::string::npos) total += std::atof(info.c_str() + at + std::strlen(field));
  }
  return total;
}

/// Hand-off of `kind` (a mutex, or a semaphore of one permit) between `waiters` managers,
/// each holding `hold_ms` and not asking again until someone else has had it.
Percentiles handoff(const Args& a, Kind kind, int waiters, int handoffs) {
  asio::io_context io(1);
  std::vector<std::unique_ptr<redis_lock::LockManager>> managers;
  for (int i = 0; i < waiters; ++i) {
    managers.push_back(std::make_unique<redis_lock::LockManager>(io.get_executor(), config(a)));
  }
  const std::string resource =
      a.stem + "handoff:" + kind_name(kind) + ":" + std::to_string(waiters);
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
    acquire(*managers[i], kind, resource, {.ttl = 10s, .wait = 60s}, 1,
            [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
              check(ec, g, "hand-off");
              if (last_owner >= 0) gaps.push_back(micros(Clock::now() - released_at));
              last_owner = i;
              ++acquisitions;
              unpark_others(i);
              auto guard = std::make_shared<redis_lock::LockGuard>(std::move(g));
              auto hold =
                  std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(a.hold_ms));
              hold->async_wait([&, i, guard, hold](boost::system::error_code) {
                released_at = Clock::now();
                guard->async_release([&, i, guard](boost::system::error_code ec2, bool ok) {
                  if (ec2 || !ok) fail("hand-off release: " + ec2.message());
                  if (acquisitions >= handoffs) return;
                  parked[i] = true;
                  if (last_owner != i) unpark_others(last_owner);
                });
              });
            });
  };
  for (int i = 0; i < waiters; ++i) want(i);
  io.run();
  return percentiles(gaps);
}

std::string spread_json(const Spread& s) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "{\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}", s.median,
                s.min, s.max);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--quick") {
      a.quick = true;
    } else if (k == "--port") {
      a.port = static_cast<std::uint16_t>(std::atoi(v)), ++i;
    } else if (k == "--hold-ms") {
      a.hold_ms = std::atoi(v), ++i;
    } else if (k == "--json") {
      a.json = v, ++i;
    } else {
      std::fprintf(stderr, "usage: kinds_bench --port P [--quick] [--hold-ms 1] [--json FILE]\n");
      return 2;
    }
  }
  a.stem = "kinds_bench:" + std::to_string(::getpid()) + ":" +
           std::to_string(std::random_device{}()) + ":";
  const int rounds = a.quick ? 3 : 7;
  const double seconds = a.quick ? 0.3 : 1.0;
  const std::vector<Kind> kinds = {Kind::mutex, Kind::permit, Kind::shared, Kind::exclusive};
  std::string json = "{\"program\": \"kinds_bench\"";

  // (a) latency, (b) throughput, (c) server CPU: rounds of every kind, alternating order.
  std::printf("(a) latency, one acquire+release at a time (p50 / p99 us; ratio to the mutex)\n");
  std::vector<std::vector<double>> p50(kinds.size()), p99(kinds.size()), lat_ratio(kinds.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> round_p50(kinds.size());
    for (std::size_t n = 0; n < kinds.size(); ++n) {
      const std::size_t k = r % 2 ? kinds.size() - 1 - n : n;
      std::vector<double> samples;
      chains(a, kinds[k], 1, seconds / 2, &samples);
      const auto p = percentiles(samples);
      p50[k].push_back(p.p50);
      p99[k].push_back(p.p99);
      round_p50[k] = p.p50;
    }
    for (std::size_t k = 0; k < kinds.size(); ++k)
      lat_ratio[k].push_back(round_p50[k] / round_p50[0]);
  }
  json += ", \"latency\": [";
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const auto ratio = bench::spread(lat_ratio[k]);
    std::printf("    %-10s p50 %7.1f  p99 %7.1f   x%.2f (%.2f-%.2f)\n", kind_name(kinds[k]),
                bench::median(p50[k]), bench::median(p99[k]), ratio.median, ratio.min, ratio.max);
    json += std::string(k ? ", " : "") + "{\"kind\": \"" + kind_name(kinds[k]) +
            "\", \"p50_us\": " + std::to_string(bench::median(p50[k])) +
            ", \"p99_us\": " + std::to_string(bench::median(p99[k])) +
            ", \"p50_vs_mutex\": " + spread_json(ratio) + "}";
  }
  json += "]";

  std::printf("(b) throughput, acquire+release pairs/s (ratio to the mutex)\n");
  json += ", \"throughput\": [";
  bool first_entry = true;
  for (int in_flight : {1, 8, 64}) {
    std::vector<std::vector<double>> tput(3), ratio(3);
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> t(3);
      for (std::size_t n = 0; n < 3; ++n) {
        const std::size_t k = r % 2 ? 2 - n : n;
        t[k] = chains(a, kinds[k], in_flight, seconds);
        tput[k].push_back(t[k]);
      }
      for (std::size_t k = 0; k < 3; ++k) ratio[k].push_back(t[k] / t[0]);
    }
    for (std::size_t k = 0; k < 3; ++k) {
      const auto s = bench::spread(ratio[k]);
      std::printf("    %3d in flight %-8s %9.0f   x%.2f (%.2f-%.2f)\n", in_flight,
                  kind_name(kinds[k]), bench::median(tput[k]), s.median, s.min, s.max);
      json += std::string(first_entry ? "" : ", ") +
              "{\"in_flight\": " + std::to_string(in_flight) + ", \"kind\": \"" +
              kind_name(kinds[k]) +
              "\", \"pairs_per_s\": " + std::to_string(bench::median(tput[k])) +
              ", \"vs_mutex\": " + spread_json(s) + "}";
      first_entry = false;
    }
  }
  json += "]";

  std::printf("(c) server CPU per acquire+release pair, 64 in flight (us; ratio to the mutex)\n");
  redisContext* admin = bench::connect_or_exit(a.port);
  std::vector<std::vector<double>> cpu(kinds.size()), cpu_ratio(kinds.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> us(kinds.size());
    for (std::size_t n = 0; n < kinds.size(); ++n) {
      const std::size_t k = r % 2 ? kinds.size() - 1 - n : n;
      const double cpu0 = server_cpu_seconds(admin);
      const auto start = Clock::now();
      const double rate = chains(a, kinds[k], 64, seconds);
      const double pairs = rate * std::chrono::duration<double>(Clock::now() - start).count();
      us[k] = (server_cpu_seconds(admin) - cpu0) * 1e6 / pairs;
      cpu[k].push_back(us[k]);
    }
    for (std::size_t k = 0; k < kinds.size(); ++k) cpu_ratio[k].push_back(us[k] / us[0]);
  }
  json += ", \"server_cpu\": [";
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const auto s = bench::spread(cpu_ratio[k]);
    std::printf("    %-10s %6.1f us   x%.2f (%.2f-%.2f)\n", kind_name(kinds[k]),
                bench::median(cpu[k]), s.median, s.min, s.max);
    json += std::string(k ? ", " : "") + "{\"kind\": \"" + kind_name(kinds[k]) +
            "\", \"us_per_pair\": " + std::to_string(bench::median(cpu[k])) +
            ", \"vs_mutex\": " + spread_json(s) + "}";
  }
  json += "]";
  redisFree(admin);

  std::printf("(d) hand-off, hold %d ms: gap from release to the next holder (p50 / p99 us)\n",
              a.hold_ms);
  json += ", \"handoff\": [";
  first_entry = true;
  for (int waiters : {2, 8}) {
    const int handoffs = a.quick ? 100 : 400;
    std::vector<double> gm50, gm99, gp50, gp99, ratio;
    for (int r = 0; r < (a.quick ? 1 : 3); ++r) {
      const auto m = handoff(a, Kind::mutex, waiters, handoffs);
      const auto p = handoff(a, Kind::permit, waiters, handoffs);
      gm50.push_back(m.p50);
      gm99.push_back(m.p99);
      gp50.push_back(p.p50);
      gp99.push_back(p.p99);
      ratio.push_back(p.p50 / m.p50);
    }
    const auto s = bench::spread(ratio);
    std::printf("    %d waiters  mutex %6.0f / %6.0f   permit %6.0f / %6.0f   x%.2f (%.2f-%.2f)\n",
                waiters, bench::median(gm50), bench::median(gm99), bench::median(gp50),
                bench::median(gp99), s.median, s.min, s.max);
    json += std::string(first_entry ? "" : ", ") + "{\"waiters\": " + std::to_string(waiters) +
            ", \"mutex_gap_p50_us\": " + std::to_string(bench::median(gm50)) +
            ", \"mutex_gap_p99_us\": " + std::to_string(bench::median(gm99)) +
            ", \"permit_gap_p50_us\": " + std::to_string(bench::median(gp50)) +
            ", \"permit_gap_p99_us\": " + std::to_string(bench::median(gp99)) +
            ", \"permit_vs_mutex\": " + spread_json(s) + "}";
    first_entry = false;
  }
  json += "]}\n";
  if (!a.json.empty()) std::ofstream(a.json) << json;
  return 0;
}

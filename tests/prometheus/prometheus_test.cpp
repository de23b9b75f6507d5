// SPDX-License-Identifier: MIT
// redis_lock::PrometheusObserver: the series it keeps, read back in Prometheus' text
// exposition format, from synthetic events (no server) and from a LockManager on a real
// redis-server.
#include "live.hpp"

#include <redis_lock/prometheus.hpp>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

/// `name{labels}` with the labels sorted by name (prometheus-cpp writes the constant ones
/// first).
std::string series_key(const std::string& name, const std::map<std::string, std::string>& labels) {
  std::string key = name;
  if (!labels.empty()) {
    key += '{';
    bool first = true;
    for (const auto& [label, value] : labels) {
      key += (first ? "" : ",") + label + "=\"" + value + "\"";
      first = false;
    }
    key += '}';
  }
  return key;
}

/// The registry's exposition, as a map from `name{labels}` (series_key) to the value.
struct Scrape {
  explicit Scrape(prometheus::Registry& registry) {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry.Collect());
    text = out.str();
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto space = line.rfind(' ');
      const auto brace = line.find('{');
      std::map<std::string, std::string> labels;
      if (brace < space) {
        // name{a="x",b="y"} (no quote or comma in these tests' values)
        std::istringstream pairs(line.substr(brace + 1, line.rfind('}') - brace - 1));
        for (std::string pair; std::getline(pairs, pair, ',');) {
          const auto eq = pair.find('=');
          labels[pair.substr(0, eq)] = pair.substr(eq + 2, pair.size() - eq - 3);
        }
      }
      values[series_key(line.substr(0, std::min(brace, space)), labels)] =
          std::stod(line.substr(space + 1));
    }
  }
  /// The value of `name` with exactly `labels`; -1 when there is no such series.
  double operator()(const std::string& name,
                    const std::map<std::string, std::string>& labels = {}) const {
    const auto it = values.find(series_key(name, labels));
    return it == values.end() ? -1 : it->second;
  }
  std::string text;
  std::map<std::string, double> values;
};

/// An idempotent request's event; its key's lock's resource is `resource` (default: the key).
IdempotencyEvent idem(std::string_view key, bool reconciler, RunKind result,
                      boost::system::error_code ec, std::uint32_t attempt, int works, int resolves,
                      bool timed_out, std::string_view resource = {}) {
  IdempotencyEvent e{};
  e.key = key;
  e.resource = resource.empty() ? key : resource;
  e.reconciler = reconciler;
  e.result = result;
  e.error = ec;
  e.attempt = attempt;
  e.works = works;
  e.resolves = resolves;
  e.timed_out = timed_out;
  e.latency = std::chrono::milliseconds(1);
  return e;
}

AcquireEvent acquired(std::string_view resource, AcquireKind kind, bool waited,
                      std::chrono::milliseconds latency) {
  AcquireEvent e{resource, AcquireOutcome::acquired, {}, latency, 1, waited, 7};
  e.kind = kind;
  return e;
}

}  // namespace

TEST(PrometheusObserver, RefusesOptionsPrometheusWouldNot) {
  const auto refused = [](PrometheusOptions o, const char* says) {
    prometheus::Registry registry;
    try {
      PrometheusObserver observer(registry, std::move(o));
      ADD_FAILURE() << "accepted; expected a refusal saying " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_TRUE(registry.Collect().empty()) << "registered something before refusing";
  };
  refused({.prefix = ""}, "prefix");
  refused({.prefix = "9lives"}, "prefix");
  refused({.prefix = "my-locks"}, "prefix");
  refused({.labels = {{"service-name", "x"}}}, "'service-name' is not a label name");
  refused({.labels = {{"__reserved", "x"}}}, "'__reserved' is not a label name");
  refused({.labels = {{"kind", "x"}}}, "'kind' is a label the observer sets itself");
  refused({.labels = {{"le", "x"}}}, "'le' is a label the observer sets itself");
  refused({.acquire_buckets = {}}, "acquire_buckets is empty");
  refused({.hold_buckets = {1, 1}}, "hold_buckets must be strictly increasing");
  refused({.command_buckets = {0.1, 0.05}}, "command_buckets must be strictly increasing");
  refused({.acquire_buckets = {0.1, std::numeric_limits<double>::infinity()}}, "finite");

  prometheus::Registry registry;
  PrometheusObserver fine(registry, {.prefix = "app:locks", .labels = {{"service", "checkout"}}});
  EXPECT_FALSE(registry.Collect().empty());
}

TEST(PrometheusObserver, EventsBecomeTheDocumentedSeries) {
  prometheus::Registry registry;
  PrometheusObserver observer(registry, {.acquire_buckets = {0.01, 0.1, 1}});
  using K = AcquireKind;
  // Three acquired mutexes (one after waiting 300 ms), a permit, one not acquired, a
  // failure, a cancelled wait.
  observer.on_acquire(acquired("a", K::mutex, false, 2ms));
  observer.on_acquire(acquired("b", K::mutex, false, 50ms));
  observer.on_wait({"c", K::mutex});
  Scrape waiting(registry);
  EXPECT_EQ(waiting("redis_lock_acquisitions_waiting", {{"kind", "mutex"}}), 1);
  observer.on_acquire(acquired("c", K::mutex, true, 300ms));
  observer.on_acquire(acquired("p", K::permit, false, 1ms));
  AcquireEvent busy{"a", AcquireOutcome::not_acquired, {}, 1ms, 1, false, 0};
  observer.on_acquire(busy);
  AcquireEvent failed{"a", AcquireOutcome::failed, error::timeout, 1ms, 1, false, 0};
  observer.on_acquire(failed);
  observer.on_wait({"d", K::shared});
  AcquireEvent cancelled{
      "d", AcquireOutcome::cancelled, boost::asio::error::operation_aborted, 1ms, 2, true, 0};
  cancelled.kind = K::shared;
  observer.on_acquire(cancelled);
  // Two holds end (one by loss), lease commands of every outcome, admin operations.
  observer.on_hold_end({"a", K::mutex, HoldEnd::released, 20ms});
  observer.on_hold_end({"b", K::mutex, HoldEnd::lost, 2s});
  observer.on_lease({"a", LeaseCommand::release, true, {}, 1ms});
  observer.on_lease({"b", LeaseCommand::renewal, false, {}, 1ms});
  observer.on_lease({"b", LeaseCommand::renewal, false, error::connection_lost, 1ms});
  observer.on_lease({"c", LeaseCommand::extend, true, {}, 3ms});
  observer.on_admin({"a", AdminCommand::inspect, {}, 1ms});
  observer.on_admin({"a", AdminCommand::force_release, error::no_permission, 1ms});
  observer.on_admin({"e", AdminCommand::observe, boost::asio::error::operation_aborted, 1s});

  const Scrape s(registry);
  SCOPED_TRACE(s.text);
  const auto acq = [&](const char* kind, const char* outcome) {
    return s("redis_lock_acquisitions_total", {{"kind", kind}, {"outcome", outcome}});
  };
  EXPECT_EQ(acq("mutex", "acquired"), 3);
  EXPECT_EQ(acq("mutex", "not_acquired"), 1);
  EXPECT_EQ(acq("mutex", "error"), 1);
  EXPECT_EQ(acq("mutex", "cancelled"), 0) << "every outcome of a kind seen exists, at 0";
  EXPECT_EQ(acq("permit", "acquired"), 1);
  EXPECT_EQ(acq("shared", "cancelled"), 1);
  EXPECT_EQ(acq("exclusive", "acquired"), -1) << "a kind never seen has no series";
  // Time to acquire: acquired only, split by waiting; buckets as configured.
  const auto h = [&](const char* series, const char* waited, const char* le = nullptr) {
    std::map<std::string, std::string> labels{{"kind", "mutex"}, {"waited", waited}};
    if (le) labels["le"] = le;
    return s(std::string("redis_lock_acquire_duration_seconds_") + series, labels);
  };
  EXPECT_EQ(h("count", "false"), 2);
  EXPECT_EQ(h("bucket", "false", "0.01"), 1);
  EXPECT_EQ(h("bucket", "false", "0.1"), 2);
  EXPECT_EQ(h("count", "true"), 1);
  EXPECT_EQ(h("bucket", "true", "0.1"), 0);
  EXPECT_EQ(h("bucket", "true", "1"), 1);
  EXPECT_NEAR(h("sum", "true"), 0.3, 1e-9);
  // Gauges: 3 mutexes acquired, 2 ended; the waits all ended.
  EXPECT_EQ(s("redis_lock_leases_held", {{"kind", "mutex"}}), 1);
  EXPECT_EQ(s("redis_lock_leases_held", {{"kind", "permit"}}), 1);
  EXPECT_EQ(s("redis_lock_acquisitions_waiting", {{"kind", "mutex"}}), 0);
  EXPECT_EQ(s("redis_lock_acquisitions_waiting", {{"kind", "shared"}}), 0);
  EXPECT_EQ(s("redis_lock_hold_duration_seconds_count", {{"kind", "mutex"}}), 2);
  EXPECT_NEAR(s("redis_lock_hold_duration_seconds_sum", {{"kind", "mutex"}}), 2.02, 1e-9);
  EXPECT_EQ(s("redis_lock_leases_lost_total", {{"kind", "mutex"}}), 1);
  EXPECT_EQ(s("redis_lock_leases_lost_total", {{"kind", "permit"}}), 0);
  // Lease commands.
  const auto cmd = [&](const char* command, const char* outcome) {
    return s("redis_lock_lease_commands_total", {{"command", command}, {"outcome", outcome}});
  };
  EXPECT_EQ(cmd("release", "ok"), 1);
  EXPECT_EQ(cmd("release", "not_held"), 0);
  EXPECT_EQ(cmd("renewal", "not_held"), 1);
  EXPECT_EQ(cmd("renewal", "error"), 1);
  EXPECT_EQ(cmd("extend", "ok"), 1);
  EXPECT_EQ(s("redis_lock_lease_command_duration_seconds_count", {{"command", "renewal"}}), 2);
  EXPECT_EQ(s("redis_lock_lease_command_duration_seconds_count", {{"command", "release"}}), -1)
      << "a release's round trip is not kept";
  // Errors by operation and kind of error (a cancellation is not an error).
  const auto err = [&](const char* operation, const char* what) {
    return s("redis_lock_errors_total", {{"operation", operation}, {"error", what}});
  };
  EXPECT_EQ(err("acquire", "timeout"), 1);
  EXPECT_EQ(err("renewal", "connection_lost"), 1);
  EXPECT_EQ(err("force_release", "no_permission"), 1);
  EXPECT_EQ(s.text.find("operation_aborted"), std::string::npos);
  EXPECT_EQ(s("redis_lock_admin_operations_total", {{"command", "inspect"}, {"outcome", "ok"}}), 1);
  EXPECT_EQ(
      s("redis_lock_admin_operations_total", {{"command", "observe"}, {"outcome", "cancelled"}}),
      1);
  // Conventions: counters end in _total, durations in _seconds; HELP and TYPE for each.
  EXPECT_NE(s.text.find("# TYPE redis_lock_acquisitions_total counter"), std::string::npos);
  EXPECT_NE(s.text.find("# TYPE redis_lock_acquire_duration_seconds histogram"), std::string::npos);
  EXPECT_NE(s.text.find("# TYPE redis_lock_leases_held gauge"), std::string::npos);
  EXPECT_NE(s.text.find("# HELP redis_lock_leases_lost_total "), std::string::npos);
  // No resource name in any series.
  for (const char* resource : {"\"a\"", "\"b\"", "\"c\"", "\"p\""}) {
    EXPECT_EQ(s.text.find(resource), std::string::npos) << resource;
  }
}

TEST(PrometheusObserver, IdempotentRunsBecomeTheDocumentedSeries) {
  prometheus::Registry registry;
  PrometheusObserver observer(registry);
  using R = RunKind;
  {
    const Scrape zero(registry);
    EXPECT_EQ(zero("redis_lock_idempotent_runs_total", {{"by", "request"}, {"outcome", "pending"}}),
              0)
        << "every outcome's series is there at 0 before the first";
  }
  observer.on_idempotency(idem("order-1", false, R::executed, {}, 1, 1, 0, false));
  observer.on_idempotency(idem("order-1", false, R::replayed, {}, 1, 0, 0, false));
  observer.on_idempotency(idem("order-2", false, R::pending, {}, 1, 1, 0, true));
  observer.on_idempotency(idem("order-2", true, R::executed, {}, 1, 0, 1, false));
  observer.on_idempotency(idem("order-3", false, R::absent, error::out_of_memory, 0, 0, 0, false));
  observer.on_idempotency(idem("order-4", false, R::executed, {}, 2, 2, 1, false));
  const Scrape s(registry);
  SCOPED_TRACE(s.text);
  const auto runs = [&](const char* by, const char* outcome) {
    return s("redis_lock_idempotent_runs_total", {{"by", by}, {"outcome", outcome}});
  };
  EXPECT_EQ(runs("request", "executed"), 2);
  EXPECT_EQ(runs("request", "replayed"), 1);
  EXPECT_EQ(runs("request", "pending"), 1);
  EXPECT_EQ(runs("reconciler", "executed"), 1);
  EXPECT_EQ(runs("request", "error"), 1);
  EXPECT_EQ(runs("request", "absent"), 0) << "an error is counted as an error";
  const auto calls = [&](const char* call) {
    return s("redis_lock_idempotent_calls_total", {{"call", call}});
  };
  EXPECT_EQ(calls("work"), 4);
  EXPECT_EQ(calls("resolve"), 2);
  EXPECT_EQ(calls("timeout"), 1);
  EXPECT_EQ(
      s("redis_lock_errors_total", {{"operation", "idempotent_run"}, {"error", "out_of_memory"}}),
      1);
  EXPECT_EQ(s.text.find("order-"), std::string::npos) << "no request key in any series";
}

TEST(PrometheusObserver, GroupsAndConstantLabels) {
  prometheus::Registry registry;
  PrometheusObserver observer(registry,
                              {.prefix = "svc_lock",
                               .labels = {{"service", "checkout"}},
                               .group = [](std::string_view resource) {
                                 return std::string(resource.substr(0, resource.find(':')));
                               }});
  observer.on_acquire(acquired("order:A-1", AcquireKind::mutex, false, 1ms));
  observer.on_acquire(acquired("order:A-2", AcquireKind::mutex, false, 1ms));
  observer.on_acquire(acquired("provider:acme", AcquireKind::permit, false, 1ms));
  observer.on_hold_end({"order:A-1", AcquireKind::mutex, HoldEnd::released, 1ms});
  // An idempotent request is grouped by its key's lock's resource, not by its bare key.
  observer.on_idempotency(idem("A-3", false, RunKind::executed, {}, 1, 1, 0, false, "idem:A-3"));
  const Scrape s(registry);
  SCOPED_TRACE(s.text);
  EXPECT_EQ(
      s("svc_lock_acquisitions_total",
        {{"group", "order"}, {"kind", "mutex"}, {"outcome", "acquired"}, {"service", "checkout"}}),
      2);
  EXPECT_EQ(s("svc_lock_acquisitions_total", {{"group", "provider"},
                                              {"kind", "permit"},
                                              {"outcome", "acquired"},
                                              {"service", "checkout"}}),
            1);
  EXPECT_EQ(
      s("svc_lock_leases_held", {{"group", "order"}, {"kind", "mutex"}, {"service", "checkout"}}),
      1);
  EXPECT_EQ(
      s("svc_lock_idempotent_runs_total",
        {{"by", "request"}, {"group", "idem"}, {"outcome", "executed"}, {"service", "checkout"}}),
      1);
  EXPECT_EQ(s.text.find("A-1"), std::string::npos);
  EXPECT_EQ(s.text.find("A-3"), std::string::npos);
  EXPECT_EQ(s.text.find("redis_lock_"), std::string::npos) << "the prefix names every metric";
}

TEST(PrometheusObserver, CountsEveryEventFromManyThreads) {
  // Several managers share one observer: their strands call it at once (also a group's
  // first event, which makes its series).
  prometheus::Registry registry;
  PrometheusObserver observer(
      registry, {.group = [](std::string_view resource) { return std::string(resource); }});
  constexpr int threads = 4, each = 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        const std::string group = "g" + std::to_string((i + t) % 8);
        observer.on_wait({group, AcquireKind::mutex});
        observer.on_acquire(acquired(group, AcquireKind::mutex, true, 1ms));
        observer.on_hold_end({group, AcquireKind::mutex, HoldEnd::released, 1ms});
        observer.on_lease({group, LeaseCommand::release, true, {}, 1ms});
      }
    });
  }
  for (auto& t : pool) t.join();
  const Scrape s(registry);
  double acquisitions = 0, releases = 0;
  for (int g = 0; g < 8; ++g) {
    const std::string group = "g" + std::to_string(g);
    acquisitions += s("redis_lock_acquisitions_total",
                      {{"group", group}, {"kind", "mutex"}, {"outcome", "acquired"}});
    releases += s("redis_lock_lease_commands_total",
                  {{"command", "release"}, {"group", group}, {"outcome", "ok"}});
    EXPECT_EQ(s("redis_lock_leases_held", {{"group", group}, {"kind", "mutex"}}), 0);
    EXPECT_EQ(s("redis_lock_acquisitions_waiting", {{"group", group}, {"kind", "mutex"}}), 0);
  }
  EXPECT_EQ(acquisitions, threads * each);
  EXPECT_EQ(releases, threads * each);
}

TEST(PrometheusObserver, ALockManagersWorkAsAnOperatorSeesIt) {
  // On a real server: acquires by outcome, a wait, a release, a lease lost to a
  // force-release, and the gauges back at zero once everything is let go.
  prometheus::Registry registry;
  auto observer = make_prometheus_observer(registry);
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config(), {.observer = observer});
  LockManager other(io.get_executor(), shared_server_config());
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    auto busy = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    EXPECT_FALSE(busy);
    EXPECT_TRUE(co_await g.async_release(asio::use_awaitable));
    // A wait: `other` holds it for 100 ms.
    auto theirs = co_await other.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(theirs);
    asio::steady_timer later(co_await asio::this_coro::executor, 100ms);
    later.async_wait([&](boost::system::error_code) { theirs.async_release(asio::detached); });
    auto waited =
        co_await locks.async_acquire(resource, {.ttl = 5s, .wait = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(waited);
    EXPECT_EQ(Scrape(registry)("redis_lock_leases_held", {{"kind", "mutex"}}), 1);
    EXPECT_TRUE(co_await waited.async_release(asio::use_awaitable));
    // Renewed, then taken away by an operator: lost.
    auto renewed = co_await locks.async_acquire(
        resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 50ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(renewed);
    EXPECT_TRUE(co_await other.async_force_release(resource, asio::use_awaitable));
    auto [lost] = co_await renewed.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(lost, error::lock_lost);
    auto [ec, none] = co_await locks.async_acquire("", {}, asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec, error::invalid_argument);
    // A refusal counts under the kind that was asked for.
    auto [ec2, none2] = co_await locks.async_acquire_permit(resource + "-sem", 0, {},
                                                            asio::as_tuple(asio::use_awaitable));
    EXPECT_EQ(ec2, error::invalid_argument);
  });
  const Scrape s(registry);
  SCOPED_TRACE(s.text);
  const auto acq = [&](const char* outcome) {
    return s("redis_lock_acquisitions_total", {{"kind", "mutex"}, {"outcome", outcome}});
  };
  EXPECT_EQ(acq("acquired"), 3);
  EXPECT_EQ(acq("not_acquired"), 1);
  EXPECT_EQ(acq("error"), 1);
  EXPECT_EQ(s("redis_lock_acquisitions_total", {{"kind", "permit"}, {"outcome", "error"}}), 1);
  EXPECT_EQ(s("redis_lock_errors_total", {{"error", "invalid_argument"}, {"operation", "acquire"}}),
            2);
  EXPECT_EQ(s("redis_lock_acquire_duration_seconds_count", {{"kind", "mutex"}, {"waited", "true"}}),
            1);
  EXPECT_GE(s("redis_lock_acquire_duration_seconds_sum", {{"kind", "mutex"}, {"waited", "true"}}),
            0.05);
  EXPECT_EQ(s("redis_lock_leases_held", {{"kind", "mutex"}}), 0);
  EXPECT_EQ(s("redis_lock_acquisitions_waiting", {{"kind", "mutex"}}), 0);
  EXPECT_EQ(s("redis_lock_leases_lost_total", {{"kind", "mutex"}}), 1);
  EXPECT_EQ(s("redis_lock_hold_duration_seconds_count", {{"kind", "mutex"}}), 3);
  EXPECT_EQ(s("redis_lock_lease_commands_total", {{"command", "release"}, {"outcome", "ok"}}), 2);
  EXPECT_GE(s("redis_lock_lease_commands_total", {{"command", "renewal"}, {"outcome", "ok"}}), 0);
  EXPECT_EQ(s("redis_lock_lease_commands_total", {{"command", "renewal"}, {"outcome", "not_held"}}),
            1);
}

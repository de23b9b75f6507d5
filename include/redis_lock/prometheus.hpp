// SPDX-License-Identifier: MIT
// Lock metrics for Prometheus: an Observer that keeps counters, histograms and gauges in the
// caller's prometheus::Registry (prometheus-cpp). An optional component, not included by
// <redis_lock/redis_lock.hpp>: link redis_lock::prometheus
// (find_package(redis_lock COMPONENTS prometheus)).
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   LockManager locks(ex, config, {.observer = redis_lock::make_prometheus_observer(*registry)});
//   exposer.RegisterCollectable(registry);  // or serialize registry->Collect() on /metrics
//
// The series (with the default prefix; every one also has the options' constant labels,
// and `group` when PrometheusOptions::group is set):
//   redis_lock_acquisitions_total{kind, outcome}          counter
//       kind: mutex, permit, shared, exclusive, election
//       outcome: acquired, not_acquired (held elsewhere: contention), error, cancelled
//   redis_lock_acquire_duration_seconds{kind, waited}     histogram, acquired only;
//       waited: "true" if it queued behind another holder
//   redis_lock_acquisitions_waiting{kind}                 gauge: queued now
//   redis_lock_leases_held{kind}                          gauge: held now
//   redis_lock_hold_duration_seconds{kind}                histogram: acquire to release/loss
//   redis_lock_leases_lost_total{kind}                    counter
//   redis_lock_lease_commands_total{command, outcome}     counter
//       command: release, extend, renewal; outcome: ok, not_held (expired or taken), error
//   redis_lock_lease_command_duration_seconds{command}    histogram: send to reply, of
//       extensions and renewals (the round trips a lease's life depends on)
//   redis_lock_errors_total{operation, error}             counter
//       operation: acquire, release, extend, renewal, inspect, force_release, leader, observe
//       error: error_name() of a redis_lock::error ("timeout", ...), else the category's name
//   redis_lock_admin_operations_total{command, outcome}   counter
//       command: inspect, force_release, leader, observe; outcome: ok, error, cancelled
// No series names a resource: their number would grow without bound.
#pragma once

#include <redis_lock/observer.hpp>
#include <redis_lock/prometheus_export.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace redis_lock {

/// How PrometheusObserver names and shapes its metrics. The defaults suit most services.
struct PrometheusOptions {
  /// The start of every metric's name (followed by '_'): `[a-zA-Z_:][a-zA-Z0-9_:]*`.
  std::string prefix = "redis_lock";
  /// Labels every series carries (e.g. {{"service", "checkout"}}). Prometheus adds `job` and
  /// `instance` itself when it scrapes.
  std::map<std::string, std::string> labels{};
  /// Bucket upper bounds in seconds, strictly increasing: the time to acquire. From 0.5 ms
  /// (an uncontended acquire on a local network) to 30 s (a long queue).
  std::vector<double> acquire_buckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,   0.5,   1,      2.5,   5,    10,    30};
  /// The time a lease was held: from 1 ms to 30 min.
  std::vector<double> hold_buckets = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1,
                                      5,     10,    30,   60,   300, 1800};
  /// An extension's or renewal's round trip: from 0.2 ms to 1 s.
  std::vector<double> command_buckets = {0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                         0.025,  0.05,   0.1,   0.25,   1};
  /// Optional: a resource's group ("order:A-17" -> "order"), put on every series as the label
  /// `group`. It must return few distinct values: each is a set of series. Called from the
  /// managers' strands, concurrently when several managers share the observer: it must be
  /// safe to call from several threads at once, and must not throw.
  std::function<std::string(std::string_view resource)> group{};
};

/// An Observer (ManagerOptions::observer) that records what managers do as Prometheus
/// metrics in `registry`. One may serve every manager of a process; its calls are thread
/// safe, and each costs a few atomic operations (a group adds a lookup).
class REDIS_LOCK_PROMETHEUS_EXPORT PrometheusObserver final : public Observer {
 public:
  /// Registers the metric families in `registry`, which must outlive this observer. Two
  /// observers with the same options on one registry share their series.
  /// Throws std::invalid_argument, before registering anything, for a prefix, label or
  /// bucket list Prometheus would not accept (and for a label the observer uses itself);
  /// prometheus-cpp throws it when the registry has a family of one of the names with
  /// another type or other constant labels.
  explicit PrometheusObserver(prometheus::Registry& registry, PrometheusOptions options = {});
  ~PrometheusObserver() override;
  PrometheusObserver(const PrometheusObserver&) = delete;
  PrometheusObserver& operator=(const PrometheusObserver&) = delete;

  void on_acquire(const AcquireEvent& e) noexcept override;
  void on_wait(const WaitEvent& e) noexcept override;
  void on_hold_end(const HoldEvent& e) noexcept override;
  void on_lease(const LeaseEvent& e) noexcept override;
  void on_admin(const AdminEvent& e) noexcept override;
  void on_idempotency(const IdempotencyEvent& e) noexcept override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `std::make_shared<PrometheusObserver>(registry, std::move(options))`.
REDIS_LOCK_PROMETHEUS_EXPORT std::shared_ptr<PrometheusObserver> make_prometheus_observer(
    prometheus::Registry& registry, PrometheusOptions options = {});

}  // namespace redis_lock

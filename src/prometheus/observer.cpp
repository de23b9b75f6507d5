// SPDX-License-Identifier: MIT
// PrometheusObserver (<redis_lock/prometheus.hpp>): observer events into prometheus-cpp
// metrics. An optional component on top of the public API: it includes public headers only
// (tests/layers/check_layers.py).
#include "labels.hpp"

#include <redis_lock/error.hpp>
#include <redis_lock/prometheus.hpp>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <boost/asio/error.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace redis_lock {
namespace {

namespace pm = ::prometheus;
using Seconds = std::chrono::duration<double>;
using prometheus_labels::count_of;
using prometheus_labels::index_of;
using prometheus_labels::labels_of;

constexpr auto kinds = count_of<AcquireKind>();
constexpr auto kind_names = labels_of<AcquireKind>();
constexpr auto acquire_outcomes = labels_of<AcquireOutcome>();
constexpr auto lease_commands = labels_of<LeaseCommand>();
constexpr std::array<const char*, 3> lease_outcomes{"ok", "not_held", "error"};
constexpr auto admin_commands = labels_of<AdminCommand>();
constexpr std::array<const char*, 3> admin_outcomes{"ok", "error", "cancelled"};
// IdempotencyEvent: who ran it, what the caller was told (RunResult::Kind's order, then an
// error), and the calls it made.
constexpr std::array<const char*, 2> idempotent_by{"request", "reconciler"};
constexpr auto idempotent_outcomes = labels_of<RunKind>(std::array<const char*, 1>{"error"});
static_assert(idempotent_outcomes.size() == count_of<RunKind>() + 1);  // "error" apart
constexpr std::array<const char*, 3> idempotent_calls{"work", "resolve", "timeout"};
// The labels the observer sets itself (and a histogram's `le`, a summary's `quantile`): a
// constant label of the same name would clash, and Prometheus would refuse the whole scrape.
constexpr std::array<const char*, 11> own_labels{"kind",      "outcome", "waited", "command",
                                                 "operation", "error",   "group",  "le",
                                                 "quantile",  "by",      "call"};

std::size_t index(AcquireKind k) noexcept { return index_of(k, 0); }

bool valid_name(std::string_view name, bool colons) noexcept {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colons && c == ':');
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void check_buckets(const std::vector<double>& buckets, const char* which) {
  if (buckets.empty()) {
    throw std::invalid_argument(std::string("PrometheusOptions::") + which + " is empty");
  }
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i])) {
      throw std::invalid_argument(std::string("PrometheusOptions::") + which +
                                  " must hold finite bounds (+Inf is added by Prometheus)");
    }
    if (i > 0 && !(buckets[i] > buckets[i - 1])) {
      throw std::invalid_argument(std::string("PrometheusOptions::") + which +
                                  " must be strictly increasing");
    }
  }
}

void check(const PrometheusOptions& o) {
  if (!valid_name(o.prefix, true)) {
    throw std::invalid_argument("PrometheusOptions::prefix '" + o.prefix +
                                "' is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  for (const auto& [name, value] : o.labels) {
    if (!valid_name(name, false) || name.rfind("__", 0) == 0) {
      throw std::invalid_argument("PrometheusOptions::labels: '" + name +
                                  "' is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not __...)");
    }
    for (const char* own : own_labels) {
      if (name == own) {
        throw std::invalid_argument("PrometheusOptions::labels: '" + name +
                                    "' is a label the observer sets itself");
      }
    }
  }
  check_buckets(o.acquire_buckets, "acquire_buckets");
  check_buckets(o.hold_buckets, "hold_buckets");
  check_buckets(o.command_buckets, "command_buckets");
}

/// The series of one kind, made when the kind is first seen: every outcome at 0 from then on
/// (a counter that appears at 1 hides its first increase from increase() and rate()).
struct KindSeries {
  std::array<pm::Counter*, acquire_outcomes.size()> acquisitions{};
  std::array<pm::Histogram*, 2> acquire_seconds{};  // [waited]
  pm::Gauge* waiting = nullptr;
  pm::Gauge* held = nullptr;
  pm::Histogram* hold_seconds = nullptr;
  pm::Counter* lost = nullptr;
};

/// Every series of one group (all of them, without groups).
struct Series {
  pm::Labels labels;  // {group} or none
  std::array<std::atomic<KindSeries*>, kinds> by_kind{};
  std::array<std::array<pm::Counter*, lease_outcomes.size()>, lease_commands.size()> commands{};
  std::array<pm::Histogram*, lease_commands.size()> command_seconds{};  // (not release)
  std::array<std::array<pm::Counter*, admin_outcomes.size()>, admin_commands.size()> admin{};
  std::array<std::array<pm::Counter*, idempotent_outcomes.size()>, idempotent_by.size()>
      idempotent_runs{};
  std::array<pm::Counter*, idempotent_calls.size()> idempotent_calls_made{};
  std::mutex errors_mutex;
  std::map<std::pair<std::string_view, std::string_view>, pm::Counter*> errors;
};

pm::Labels with(pm::Labels labels,
                std::initializer_list<std::pair<std::string_view, std::string_view>> more) {
  for (const auto& [name, value] : more) labels.emplace(std::string(name), std::string(value));
  return labels;
}

/// The error label: the name of a redis_lock::error, else the category's name ("system").
std::string_view error_label(boost::system::error_code ec) noexcept {
  if (ec.category() == error_category()) return error_name(static_cast<error>(ec.value()));
  return ec.category().name();
}

}  // namespace

struct PrometheusObserver::Impl {
  explicit Impl(pm::Registry& registry, PrometheusOptions o)
      : options(std::move(o)),
        acquisitions(family<pm::Counter>(registry, "acquisitions_total",
                                         "Acquires completed, by kind and outcome")),
        acquire_seconds(family<pm::Histogram>(
            registry, "acquire_duration_seconds",
            "Time from the call to the lease, of acquires that got it; waited: it queued")),
        waiting(family<pm::Gauge>(registry, "acquisitions_waiting",
                                  "Acquires queued behind another holder now")),
        held(family<pm::Gauge>(registry, "leases_held", "Leases held now")),
        hold_seconds(family<pm::Histogram>(registry, "hold_duration_seconds",
                                           "Time a lease was held, from acquire to release or "
                                           "loss")),
        lost(family<pm::Counter>(registry, "leases_lost_total",
                                 "Leases lost while held (expired unrenewed or taken)")),
        commands(family<pm::Counter>(registry, "lease_commands_total",
                                     "Releases, extensions and renewals, by outcome")),
        command_seconds(family<pm::Histogram>(registry, "lease_command_duration_seconds",
                                              "Round trip of extensions and renewals")),
        errors(family<pm::Counter>(registry, "errors_total",
                                   "Operations that failed, by operation and error")),
        admin(family<pm::Counter>(registry, "admin_operations_total",
                                  "Inspections, force-releases, leader reads and observations")),
        idempotent_runs(family<pm::Counter>(
            registry, "idempotent_runs_total",
            "Idempotent requests' runs and reconciler's looks, by what the caller was told")),
        idempotent_calls_made(family<pm::Counter>(
            registry, "idempotent_calls_total",
            "Calls of the work (attempts sent) and of resolve, and their deadlines passed")) {
    if (!options.group) all = make_series({});
  }

  template <class T>
  pm::Family<T>& family(pm::Registry& registry, const char* name, const char* help) {
    auto builder = [&]() -> decltype(auto) {
      if constexpr (std::is_same_v<T, pm::Counter>) return pm::BuildCounter();
      if constexpr (std::is_same_v<T, pm::Gauge>) return pm::BuildGauge();
      if constexpr (std::is_same_v<T, pm::Histogram>) return pm::BuildHistogram();
    }();
    return builder.Name(options.prefix + "_" + name)
        .Help(help)
        .Labels(options.labels)
        .Register(registry);
  }

  std::unique_ptr<Series> make_series(pm::Labels labels) {
    auto s = std::make_unique<Series>();
    s->labels = std::move(labels);
    for (std::size_t c = 0; c < lease_commands.size(); ++c) {
      for (std::size_t o = 0; o < lease_outcomes.size(); ++o) {
        s->commands[c][o] = &commands.Add(
            with(s->labels, {{"command", lease_commands[c]}, {"outcome", lease_outcomes[o]}}));
      }
      // The round trips that decide whether a lease outlives its ttl: extensions and
      // renewals. (A release's is left out: nothing waits on it, and every pair would pay.)
      if (c != index_of(LeaseCommand::release, 0)) {
        s->command_seconds[c] = &command_seconds.Add(
            with(s->labels, {{"command", lease_commands[c]}}), options.command_buckets);
      }
    }
    for (std::size_t c = 0; c < admin_commands.size(); ++c) {
      for (std::size_t o = 0; o < admin_outcomes.size(); ++o) {
        s->admin[c][o] = &admin.Add(
            with(s->labels, {{"command", admin_commands[c]}, {"outcome", admin_outcomes[o]}}));
      }
    }
    for (std::size_t b = 0; b < idempotent_by.size(); ++b) {
      for (std::size_t o = 0; o < idempotent_outcomes.size(); ++o) {
        s->idempotent_runs[b][o] = &idempotent_runs.Add(
            with(s->labels, {{"by", idempotent_by[b]}, {"outcome", idempotent_outcomes[o]}}));
      }
    }
    for (std::size_t c = 0; c < idempotent_calls.size(); ++c) {
      s->idempotent_calls_made[c] =
          &idempotent_calls_made.Add(with(s->labels, {{"call", idempotent_calls[c]}}));
    }
    return s;
  }

  /// The group's series (made at its first event).
  Series& series(std::string_view resource) {
    if (all) return *all;
    std::string name;
    try {
      name = options.group(resource);
    } catch (...) {
      name = "unknown";  // the function must not throw; if it does, nothing is lost
    }
    {
      std::shared_lock lock(groups_mutex);
      if (auto it = groups.find(name); it != groups.end()) return *it->second;
    }
    std::unique_lock lock(groups_mutex);
    if (auto it = groups.find(name); it != groups.end()) return *it->second;
    auto made = make_series({{"group", name}});  // (may throw: nothing is inserted then)
    return *groups.emplace(std::move(name), std::move(made)).first->second;
  }

  KindSeries& of(Series& s, AcquireKind kind) {
    auto& slot = s.by_kind[index(kind)];
    if (auto* made = slot.load(std::memory_order_acquire)) return *made;
    std::lock_guard lock(kinds_mutex);
    if (auto* made = slot.load(std::memory_order_acquire)) return *made;
    auto k = std::make_unique<KindSeries>();
    const char* name = kind_names[index(kind)];
    for (std::size_t o = 0; o < acquire_outcomes.size(); ++o) {
      k->acquisitions[o] =
          &acquisitions.Add(with(s.labels, {{"kind", name}, {"outcome", acquire_outcomes[o]}}));
    }
    k->acquire_seconds[0] = &acquire_seconds.Add(
        with(s.labels, {{"kind", name}, {"waited", "false"}}), options.acquire_buckets);
    k->acquire_seconds[1] = &acquire_seconds.Add(
        with(s.labels, {{"kind", name}, {"waited", "true"}}), options.acquire_buckets);
    k->waiting = &waiting.Add(with(s.labels, {{"kind", name}}));
    k->held = &held.Add(with(s.labels, {{"kind", name}}));
    k->hold_seconds = &hold_seconds.Add(with(s.labels, {{"kind", name}}), options.hold_buckets);
    k->lost = &lost.Add(with(s.labels, {{"kind", name}}));
    // Kept first, published after: a push_back that throws leaves nothing dangling.
    kind_series.push_back(std::move(k));
    slot.store(kind_series.back().get(), std::memory_order_release);
    return *kind_series.back();
  }

  void count_error(Series& s, std::string_view operation, boost::system::error_code ec) {
    const auto what = error_label(ec);
    std::lock_guard lock(s.errors_mutex);
    auto& counter = s.errors[{operation, what}];
    if (!counter) {
      counter = &errors.Add(with(s.labels, {{"operation", operation}, {"error", what}}));
    }
    counter->Increment();
  }

  PrometheusOptions options;
  pm::Family<pm::Counter>& acquisitions;
  pm::Family<pm::Histogram>& acquire_seconds;
  pm::Family<pm::Gauge>& waiting;
  pm::Family<pm::Gauge>& held;
  pm::Family<pm::Histogram>& hold_seconds;
  pm::Family<pm::Counter>& lost;
  pm::Family<pm::Counter>& commands;
  pm::Family<pm::Histogram>& command_seconds;
  pm::Family<pm::Counter>& errors;
  pm::Family<pm::Counter>& admin;
  pm::Family<pm::Counter>& idempotent_runs;
  pm::Family<pm::Counter>& idempotent_calls_made;

  std::unique_ptr<Series> all;  // without groups
  std::shared_mutex groups_mutex;
  std::unordered_map<std::string, std::unique_ptr<Series>> groups;
  std::mutex kinds_mutex;
  std::vector<std::unique_ptr<KindSeries>> kind_series;
};

PrometheusObserver::PrometheusObserver(prometheus::Registry& registry, PrometheusOptions options) {
  check(options);
  impl_ = std::make_unique<Impl>(registry, std::move(options));
}

PrometheusObserver::~PrometheusObserver() = default;

void PrometheusObserver::on_acquire(const AcquireEvent& e) noexcept {
  try {
    auto& s = impl_->series(e.resource);
    auto& k = impl_->of(s, e.kind);
    const auto outcome = index_of(e.outcome, acquire_outcomes.size());
    if (outcome >= acquire_outcomes.size()) return;
    if (e.outcome == AcquireOutcome::acquired) {
      k.acquire_seconds[e.waited ? 1 : 0]->Observe(Seconds(e.latency).count());
      k.held->Increment();
    } else if (e.outcome == AcquireOutcome::failed) {
      impl_->count_error(s, "acquire", e.error);
    }
    k.acquisitions[outcome]->Increment();
    if (e.waited) k.waiting->Decrement();
  } catch (...) {
    // Out of memory making a series: this event goes uncounted.
  }
}

void PrometheusObserver::on_wait(const WaitEvent& e) noexcept {
  try {
    impl_->of(impl_->series(e.resource), e.kind).waiting->Increment();
  } catch (...) {
  }
}

void PrometheusObserver::on_hold_end(const HoldEvent& e) noexcept {
  try {
    auto& k = impl_->of(impl_->series(e.resource), e.kind);
    k.held->Decrement();
    k.hold_seconds->Observe(Seconds(e.held_for).count());
    if (e.end == HoldEnd::lost) k.lost->Increment();
  } catch (...) {
  }
}

void PrometheusObserver::on_lease(const LeaseEvent& e) noexcept {
  try {
    auto& s = impl_->series(e.resource);
    const auto command = index_of(e.command, lease_commands.size());
    if (command >= lease_commands.size()) return;
    const std::size_t outcome = e.error ? 2 : e.succeeded ? 0 : 1;
    s.commands[command][outcome]->Increment();
    if (auto* h = s.command_seconds[command]) h->Observe(Seconds(e.latency).count());
    if (e.error) impl_->count_error(s, lease_commands[command], e.error);
  } catch (...) {
  }
}

void PrometheusObserver::on_admin(const AdminEvent& e) noexcept {
  try {
    auto& s = impl_->series(e.resource);
    const auto command = index_of(e.command, admin_commands.size());
    if (command >= admin_commands.size()) return;
    std::size_t outcome = 0;
    if (e.error == boost::asio::error::operation_aborted) {
      outcome = 2;
    } else if (e.error) {
      outcome = 1;
      impl_->count_error(s, admin_commands[command], e.error);
    }
    s.admin[command][outcome]->Increment();
  } catch (...) {
  }
}

void PrometheusObserver::on_idempotency(const IdempotencyEvent& e) noexcept {
  try {
    // Grouped by the key's lock's resource, as the lock's own events of that key are.
    auto& s = impl_->series(e.resource);
    const std::size_t by = e.reconciler ? 1 : 0;
    // (A value it does not know goes uncounted, not as another.)
    auto outcome = index_of(e.result, idempotent_outcomes.size());
    if (e.error) {
      outcome = idempotent_outcomes.size() - 1;
      impl_->count_error(s, e.reconciler ? "idempotent_reconcile" : "idempotent_run", e.error);
    }
    if (outcome >= idempotent_outcomes.size()) return;
    s.idempotent_runs[by][outcome]->Increment();
    if (e.works > 0) s.idempotent_calls_made[0]->Increment(e.works);
    if (e.resolves > 0) s.idempotent_calls_made[1]->Increment(e.resolves);
    if (e.timed_out) s.idempotent_calls_made[2]->Increment();
  } catch (...) {
  }
}

std::shared_ptr<PrometheusObserver> make_prometheus_observer(prometheus::Registry& registry,
                                                             PrometheusOptions options) {
  return std::make_shared<PrometheusObserver>(registry, std::move(options));
}

}  // namespace redis_lock

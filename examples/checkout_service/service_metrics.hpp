// SPDX-License-Identifier: MIT
// The checkout service's metrics: the lock's (redis_lock::PrometheusObserver) and its own, in
// one prometheus::Registry that each worker serves on /metrics (--metrics-port).
//   checkout_responses_total{code, replayed}       answers to POST /checkout
//   checkout_charges_total{via}                    charges the provider made for this worker's
//                                                  calls (request, reconciler), counted as
//                                                  its answer comes
//   checkout_reconcile_retries_total{result}       reconciler looks: decided, voided,
//                                                  escalated, pending (still undecided)
//   checkout_reconcile_backoff_seconds             the wait before an undecided order's next
//                                                  look
//   checkout_reconcile_max_retry                   the highest retry number a pending look of
//                                                  the last round found (the order's looks
//                                                  that found it unknown, clients' included,
//                                                  less the first)
//   checkout_provider_requests_total{call, code}   provider calls (charge, lookup) by HTTP
//                                                  status ("none": no answer in time)
//   checkout_provider_request_duration_seconds{call}
#pragma once

#include <redis_lock/prometheus.hpp>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>

namespace checkout {

class ServiceMetrics {
 public:
  ServiceMetrics()
      : registry_(std::make_shared<prometheus::Registry>()),
        responses_(prometheus::BuildCounter()
                       .Name("checkout_responses_total")
                       .Help("Answers to POST /checkout, by status code and whether replayed")
                       .Register(*registry_)),
        charges_(prometheus::BuildCounter()
                     .Name("checkout_charges_total")
                     .Help("Charges this worker recorded, by who settled them")
                     .Register(*registry_)),
        retries_(prometheus::BuildCounter()
                     .Name("checkout_reconcile_retries_total")
                     .Help("Reconciler retries of pending orders, by result")
                     .Register(*registry_)),
        backoff_(prometheus::BuildHistogram()
                     .Name("checkout_reconcile_backoff_seconds")
                     .Help("Wait before an undecided order's next reconcile retry")
                     .Register(*registry_)
                     .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 30, 60, 120, 300,
                                                                      600, 1800, 3600, 86400})),
        max_retry_(prometheus::BuildGauge()
                       .Name("checkout_reconcile_max_retry")
                       .Help("Highest retry number among the orders of the last reconcile round")
                       .Register(*registry_)
                       .Add({})),
        provider_calls_(prometheus::BuildCounter()
                            .Name("checkout_provider_requests_total")
                            .Help("Calls to the payment provider, by call and status code")
                            .Register(*registry_)),
        provider_seconds_(prometheus::BuildHistogram()
                              .Name("checkout_provider_request_duration_seconds")
                              .Help("Payment provider calls, from sending to the answer")
                              .Register(*registry_)) {
    // The series an alert or a dashboard reads exist from the start, at 0.
    for (const char* code : {"201", "202", "402", "409", "422", "503"}) {
      responses_.Add({{"code", code}, {"replayed", "false"}});
    }
    for (const char* via : {"request", "reconciler"}) charges_.Add({{"via", via}});
    for (const char* result : {"decided", "voided", "escalated", "pending"}) {
      retries_.Add({{"result", result}});
    }
    // The two calls' histograms, made once: Family::Add builds a new histogram (and its
    // bucket vector) on every call, even for a series that exists.
    const prometheus::Histogram::BucketBoundaries buckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                          0.5,   1,    2.5,   5,    10};
    charge_seconds_ = &provider_seconds_.Add({{"call", "charge"}}, buckets);
    lookup_seconds_ = &provider_seconds_.Add({{"call", "lookup"}}, buckets);
  }

  /// The lock's observer: its series in this registry; orders grouped as "order", the
  /// provider's semaphore as "payment-provider".
  std::shared_ptr<redis_lock::PrometheusObserver> lock_observer() {
    return redis_lock::make_prometheus_observer(
        *registry_, {.group = [](std::string_view resource) {
          return std::string(resource.substr(0, resource.find(':')));
        }});
  }

  void response(unsigned code, bool replayed) {
    responses_.Add({{"code", std::to_string(code)}, {"replayed", replayed ? "true" : "false"}})
        .Increment();
  }
  void charge(const char* via) { charges_.Add({{"via", via}}).Increment(); }
  void retried(const char* result) { retries_.Add({{"result", result}}).Increment(); }
  void backoff(std::chrono::milliseconds next_in) {
    backoff_.Observe(std::chrono::duration<double>(next_in).count());
  }
  void round_done(int max_retry) { max_retry_.Set(max_retry); }
  /// A provider call: a charge (true) or a lookup; `status` 0 when no answer came.
  void provider(bool charge, int status, std::chrono::steady_clock::duration took) {
    provider_calls_
        .Add({{"call", charge ? "charge" : "lookup"},
              {"code", status ? std::to_string(status) : "none"}})
        .Increment();
    (charge ? charge_seconds_ : lookup_seconds_)
        ->Observe(std::chrono::duration<double>(took).count());
  }

  /// The text exposition format (version 0.0.4) of every series.
  std::string text() const {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return out.str();
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& responses_;
  prometheus::Family<prometheus::Counter>& charges_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Histogram& backoff_;
  prometheus::Gauge& max_retry_;
  prometheus::Family<prometheus::Counter>& provider_calls_;
  prometheus::Family<prometheus::Histogram>& provider_seconds_;
  prometheus::Histogram* charge_seconds_ = nullptr;
  prometheus::Histogram* lookup_seconds_ = nullptr;
};

}  // namespace checkout

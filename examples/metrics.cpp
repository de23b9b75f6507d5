// SPDX-License-Identifier: MIT
// Metrics from the observer hooks: eight tasks contend for three resources, some holding with
// auto-renewal; an Observer counts what happened and prints it with fmt. Replace the printing
// with your metrics library (Prometheus counters, OpenTelemetry histograms, ...).
//
//   metrics [redis://127.0.0.1:6379]     (or set REDIS_LOCK_URL)
#include <redis_lock/redis_lock.hpp>

#include <fmt/core.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

/// Counts by kind and keeps acquire latencies. Called from the managers' strands: a mutex,
/// because several managers (or threads) may share one observer.
class Metrics final : public redis_lock::Observer {
 public:
  void on_acquire(const redis_lock::AcquireEvent& e) noexcept override {
    std::lock_guard lock(mutex_);
    ++acquires_[e.outcome];
    if (e.waited && e.outcome == redis_lock::AcquireOutcome::acquired) ++waited_;
    attempts_ += e.attempts;
    if (e.error) ++errors_[e.error.message()];
    if (e.outcome == redis_lock::AcquireOutcome::acquired) {
      latencies_us_.push_back(
          std::chrono::duration_cast<std::chrono::microseconds>(e.latency).count());
    }
  }
  void on_lease(const redis_lock::LeaseEvent& e) noexcept override {
    std::lock_guard lock(mutex_);
    ++leases_[{e.command, e.succeeded}];
    if (e.error) ++errors_[e.error.message()];
  }
  void on_lost(std::string_view resource) noexcept override {
    std::lock_guard lock(mutex_);
    ++lost_;
    fmt::print("  lost the lock on {}\n", resource);
  }

  void print() {
    std::lock_guard lock(mutex_);
    using O = redis_lock::AcquireOutcome;
    using C = redis_lock::LeaseCommand;
    fmt::print(
        "acquires: {} acquired ({} after waiting), {} not acquired, {} failed, "
        "{} cancelled; {} attempts in all\n",
        acquires_[O::acquired], waited_, acquires_[O::not_acquired], acquires_[O::failed],
        acquires_[O::cancelled], attempts_);
    std::sort(latencies_us_.begin(), latencies_us_.end());
    if (!latencies_us_.empty()) {
      const auto at = [&](double q) {
        return latencies_us_[static_cast<std::size_t>(q * (latencies_us_.size() - 1))];
      };
      fmt::print("acquire latency: p50 {} us, p90 {} us, max {} us (waiting included)\n", at(0.5),
                 at(0.9), latencies_us_.back());
    }
    fmt::print(
        "releases: {} ok, {} already expired; extensions {}; renewals {} ok, {} failed; "
        "lost {}\n",
        leases_[{C::release, true}], leases_[{C::release, false}], leases_[{C::extend, true}],
        leases_[{C::renewal, true}], leases_[{C::renewal, false}], lost_);
    for (const auto& [what, n] : errors_) fmt::print("error '{}': {}\n", what, n);
  }

 private:
  std::mutex mutex_;
  std::map<redis_lock::AcquireOutcome, int> acquires_;
  std::map<std::pair<redis_lock::LeaseCommand, bool>, int> leases_;
  std::map<std::string, int> errors_;
  std::vector<long long> latencies_us_;
  int waited_ = 0, attempts_ = 0, lost_ = 0;
};

asio::awaitable<void> task(redis_lock::LockManager& locks, int id) {
  auto ex = co_await asio::this_coro::executor;
  const std::string resource = "metrics-demo:" + std::to_string(id % 3);
  for (int round = 0; round < 5; ++round) {
    // Odd tasks wait their turn; even ones try once and move on when it is busy.
    const redis_lock::LockOptions options{
        .ttl = 300ms, .wait = id % 2 ? 2s : 0ms, .auto_renew = id % 4 == 1};
    auto [ec, guard] =
        co_await locks.async_acquire(resource, options, asio::as_tuple(asio::use_awaitable));
    if (ec || !guard) continue;
    asio::steady_timer work(ex, id % 4 == 1 ? 120ms : 10ms);  // renewed while it works
    co_await work.async_wait(asio::use_awaitable);
    co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("REDIS_LOCK_URL");
  const std::string url = argc > 1 ? argv[1] : env ? env : "redis://127.0.0.1:6379";
  auto config = redis_lock::ConnectionConfig::from_url(url);
  if (!config) {
    fmt::print(stderr, "not a redis:// URL\n");
    return 2;
  }
  auto metrics = std::make_shared<Metrics>();
  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), *config, {.observer = metrics});
  for (int id = 0; id < 8; ++id) asio::co_spawn(io, task(locks, id), asio::detached);
  io.run();
  metrics->print();
  return 0;
}

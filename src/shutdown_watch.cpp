// SPDX-License-Identifier: MIT
#include "shutdown_watch.hpp"

#include "engine.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>

#include <mutex>
#include <vector>

namespace redis_lock::detail {

namespace asio = boost::asio;

namespace {

/// An execution_context service: the context calls shutdown() on it when it shuts down.
class ShutdownWatch final : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;
  explicit ShutdownWatch(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}

  void add(std::weak_ptr<Engine> entry) {
    std::lock_guard lock(mutex_);
    std::erase_if(services_, [](const auto& w) { return w.expired(); });
    services_.push_back(std::move(entry));
  }

 private:
  void shutdown() override {
    std::vector<std::weak_ptr<Engine>> services;
    {
      std::lock_guard lock(mutex_);
      services.swap(services_);
    }
    for (auto& weak : services) {
      if (auto alive = weak.lock()) alive->on_context_shutdown();
    }
  }

  std::mutex mutex_;
  std::vector<std::weak_ptr<Engine>> services_;
};

asio::execution_context::id ShutdownWatch::id;

}  // namespace

void watch_shutdown(const asio::any_io_executor& executor, std::weak_ptr<Engine> service) {
  auto& ctx = asio::query(executor, asio::execution::context);
  // A context shuts its services down in the reverse order of their creation, and the timer
  // service (with the reactor under it) destroys the handlers waiting on it when it does:
  // an acquire asleep in the queue would be gone before its last words. A timer made first
  // makes sure those services exist before ours, so ours shuts down before them.
  if (!asio::has_service<ShutdownWatch>(ctx)) asio::steady_timer probe(executor);
  asio::use_service<ShutdownWatch>(ctx).add(std::move(service));
}

}  // namespace redis_lock::detail

// SPDX-License-Identifier: MIT
// The metrics block of README.md and docs/operations.md (redis_lock::prometheus), run against
// a live server: the three lines turn the metrics on, and an acquire shows in the registry.
#include "snippets.hpp"

#include <redis_lock/prometheus.hpp>

#include <boost/asio/use_future.hpp>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <memory>
#include <sstream>
#include <string>

using namespace redis_lock::test;

namespace {

/// The block with what it uses (`ex`, `config`), then one acquire: the exposition after it.
std::string enabled_then_acquired(asio::io_context& io, redis_lock::ConnectionConfig config) {
  const auto ex = io.get_executor();
  //[prometheus_enable
  auto registry = std::make_shared<prometheus::Registry>();  // the one your /metrics serves
  redis_lock::LockManager locks(ex, config,
                                {.observer = redis_lock::make_prometheus_observer(*registry)});
  //]
  auto guard = locks.async_acquire("report:daily", {.ttl = 5s}, asio::use_future);
  io.run_for(5s);
  EXPECT_TRUE(guard.get());
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, registry->Collect());
  return text.str();
}

}  // namespace

class PrometheusSnippet : public Snippet {};

TEST_F(PrometheusSnippet, ThreeLinesTurnTheMetricsOn) {
  asio::io_context io;
  const auto text = enabled_then_acquired(io, config());
  EXPECT_NE(text.find(R"(redis_lock_acquisitions_total{kind="mutex",outcome="acquired"} 1)"),
            std::string::npos)
      << text;
}

// SPDX-License-Identifier: MIT
// A consumer of the installed (or embedded) library: compiles against the public headers
// only and checks a bad input is refused without a server. It also uses a part of Asio that
// BOOST_ASIO_NO_DEPRECATED removes: the library's build choices must not reach its consumers.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdio>

#ifdef CONSUMER_WITH_PROMETHEUS
// The optional component, as find_package(redis_lock COMPONENTS prometheus) gives it.
#include <redis_lock/prometheus.hpp>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sstream>
#endif

int main() {
  boost::asio::io_context io;
  auto cfg = redis_lock::ConnectionConfig::from_url("redis://127.0.0.1:1");
  if (!cfg) return 1;
  redis_lock::ManagerOptions options;
#ifdef CONSUMER_WITH_PROMETHEUS
  prometheus::Registry registry;
  options.observer = redis_lock::make_prometheus_observer(registry);
#endif
  redis_lock::LockManager locks(io.get_executor(), *cfg, options);
  bool refused = false;
  locks.async_acquire("", {}, [&](boost::system::error_code ec, redis_lock::LockGuard g) {
    refused = ec == redis_lock::error::invalid_argument && !g;
  });
  io.post([] {});  // deprecated in Asio, yet the consumer's to choose
  io.run();
#ifdef CONSUMER_WITH_PROMETHEUS
  // The refusal is counted.
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, registry.Collect());
  if (text.str().find("redis_lock_acquisitions_total{kind=\"mutex\",outcome=\"error\"} 1") ==
      std::string::npos) {
    std::printf("the refusal is not in the metrics:\n%s", text.str().c_str());
    refused = false;
  }
#endif
  std::printf("redis_lock %s consumer: %s\n", REDIS_LOCK_VERSION_STRING, refused ? "ok" : "FAILED");
  return refused ? 0 : 1;
}

// SPDX-License-Identifier: MIT
// Bad input completes with invalid_argument before anything is sent; empty guards never touch
// Redis. The "server" here is a listening socket that counts connection attempts.
#include <redis_lock/redis_lock.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>

#include <functional>
#include <optional>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redis_lock::error;

namespace {

struct CountingListener {
  asio::io_context& io;
  asio::ip::tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
  int accepted = 0;
  std::optional<asio::ip::tcp::socket> peer;

  explicit CountingListener(asio::io_context& ctx) : io(ctx) { accept(); }
  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket s) {
      if (ec) return;
      ++accepted;
      peer.emplace(std::move(s));
    });
  }
  redis_lock::ConnectionConfig config() const {
    redis_lock::ConnectionConfig cfg;
    cfg.port = acceptor.local_endpoint().port();
    return cfg;
  }
};

}  // namespace

TEST(Validation, BadOptionsAreRejectedBeforeAnythingIsSent) {
  asio::io_context io;
  CountingListener listener(io);
  redis_lock::LockManager locks(io.get_executor(), listener.config());

  struct Case {
    std::string resource;
    redis_lock::LockOptions options;
  };
  const Case cases[] = {
      {"", {}},
      {"r", {.ttl = 0ms}},
      {"r", {.ttl = -5ms}},
      {"r", {.ttl = std::chrono::milliseconds::min()}},
      {"r", {.ttl = std::chrono::milliseconds::max()}},
      {"r", {.ttl = 1s, .wait = -1ms}},
      {"r", {.ttl = 1s, .wait = std::chrono::milliseconds::min()}},
      {"r", {.ttl = 1s, .auto_renew = true, .renew_every = -1ms}},
      {"r", {.ttl = 1s, .auto_renew = true, .max_hold = -1ms}},
      {"r", {.ttl = 1s, .min_replicas = -1}},
      {"r", {.ttl = 1s, .min_replicas = 1, .replication_timeout = -1ms}},
  };
  int completed = 0;
  bool initiating = false;
  for (const auto& c : cases) {
    initiating = true;
    locks.async_acquire(c.resource, c.options,
                        [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                          EXPECT_FALSE(initiating) << "completed inside the initiating call";
                          EXPECT_EQ(ec, error::invalid_argument);
                          EXPECT_FALSE(g);
                          if (++completed == static_cast<int>(std::size(cases))) {
                            listener.acceptor.close();
                          }
                        });
    initiating = false;
  }
  io.run_for(2s);
  EXPECT_EQ(completed, static_cast<int>(std::size(cases)));
  EXPECT_EQ(listener.accepted, 0);
}

TEST(Validation, EmptyGuardCompletesWithoutRedis) {
  asio::io_context io;
  redis_lock::LockGuard empty;
  EXPECT_FALSE(empty.owns_lock());
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.fencing_token(), 0u);
  EXPECT_TRUE(empty.token().empty());

  // (use_future would complete on the system executor's thread; futures across threads are
  // covered by the integration tests, with an io_context thread.)
  std::optional<bool> extended;
  empty.async_extend(1s, asio::bind_executor(io, [&](boost::system::error_code ec, bool ok) {
                       EXPECT_FALSE(ec);
                       extended = ok;
                     }));
  // With a callback bound to an io_context, it runs there and not inline.
  bool called = false;
  empty.async_release(asio::bind_executor(io, [&](boost::system::error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    EXPECT_FALSE(ok);
    called = true;
  }));
  EXPECT_FALSE(called);
  io.run_for(2s);
  EXPECT_TRUE(called);
  ASSERT_TRUE(extended);
  EXPECT_FALSE(*extended);
}

TEST(Validation, BadConnectionConfigsAreRejectedBeforeConnecting) {
  asio::io_context io;
  CountingListener listener(io);
  using Config = redis_lock::ConnectionConfig;
  struct Case {
    const char* what;
    std::function<void(Config&)> change;
    error expected;
  };
  const Case cases[] = {
      {"TLS file without tls", [](Config& c) { c.tls_ca_file = "/etc/hostname"; },
       error::invalid_argument},
      {"tls_verify off without tls", [](Config& c) { c.tls_verify = false; },
       error::invalid_argument},
      {"certificate without key",
       [](Config& c) { c.tls = true, c.tls_cert_file = "/etc/hostname"; }, error::invalid_argument},
      {"key without certificate", [](Config& c) { c.tls = true, c.tls_key_file = "/etc/hostname"; },
       error::invalid_argument},
      {"TLS over a Unix socket", [](Config& c) { c.tls = true, c.unix_socket = "/tmp/x.sock"; },
       error::invalid_argument},
      {"no host", [](Config& c) { c.host.clear(); }, error::invalid_argument},
      {"port 0", [](Config& c) { c.port = 0; }, error::invalid_argument},
      {"negative database", [](Config& c) { c.database = -1; }, error::invalid_argument},
      {"zero connect timeout", [](Config& c) { c.connect_timeout = 0ms; }, error::invalid_argument},
      {"negative command timeout", [](Config& c) { c.command_timeout = -1ms; },
       error::invalid_argument},
      {"missing CA file", [](Config& c) { c.tls = true, c.tls_ca_file = "/nonexistent/ca.pem"; },
       error::tls_config_invalid},
      {"CA file that is not PEM", [](Config& c) { c.tls = true, c.tls_ca_file = "/etc/hostname"; },
       error::tls_config_invalid},
      {"certificate file that is not PEM",
       [](Config& c) {
         c.tls = true, c.tls_cert_file = "/etc/hostname", c.tls_key_file = "/etc/hostname";
       },
       error::tls_config_invalid},
      {"nodes with a standalone topology",
       [](Config& c) {
         c.nodes = {{"127.0.0.1", 7000}};
       },
       error::invalid_argument},
      {"Cluster database 3",
       [](Config& c) { c.topology = redis_lock::Topology::cluster, c.database = 3; },
       error::invalid_argument},
      {"Cluster node without host",
       [](Config& c) {
         c.topology = redis_lock::Topology::cluster, c.nodes = {{"", 7000}};
       },
       error::invalid_argument},
      {"Cluster node on port 0",
       [](Config& c) {
         c.topology = redis_lock::Topology::cluster, c.nodes = {{"h", 0}};
       },
       error::invalid_argument},
      {"Cluster over a Unix socket",
       [](Config& c) { c.topology = redis_lock::Topology::cluster, c.unix_socket = "/tmp/x"; },
       error::invalid_argument},
      {"Sentinel without a master name",
       [](Config& c) { c.topology = redis_lock::Topology::sentinel; }, error::invalid_argument},
      {"Sentinel master name with a space",
       [](Config& c) { c.topology = redis_lock::Topology::sentinel, c.sentinel_master = "a b"; },
       error::invalid_argument},
      {"sentinel password without Sentinel", [](Config& c) { c.sentinel_password = "pw"; },
       error::invalid_argument},
      {"Redlock with two masters",
       [](Config& c) {
         c.topology = redis_lock::Topology::redlock, c.nodes = {{"a", 1}, {"b", 2}};
       },
       error::invalid_argument},
      {"Redlock with a master twice",
       [](Config& c) {
         c.topology = redis_lock::Topology::redlock, c.nodes = {{"a", 1}, {"b", 2}, {"a", 1}};
       },
       error::invalid_argument},
      {"unknown topology", [](Config& c) { c.topology = static_cast<redis_lock::Topology>(42); },
       error::invalid_argument},
  };
  for (const auto& c : cases) {
    auto cfg = listener.config();
    c.change(cfg);
    redis_lock::LockManager locks(io.get_executor(), cfg);
    std::optional<boost::system::error_code> result;
    locks.async_acquire("r", {}, [&](boost::system::error_code ec, redis_lock::LockGuard g) {
      EXPECT_FALSE(g.owns_lock());
      result = ec;
    });
    io.restart();
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (!result && std::chrono::steady_clock::now() < until) io.run_one_for(100ms);
    ASSERT_TRUE(result) << c.what;
    EXPECT_EQ(*result, c.expected) << c.what << ": " << result->message();
  }
  EXPECT_EQ(listener.accepted, 0);
}

TEST(Validation, MovedFromManagerRefusesInsteadOfCrashing) {
  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), redis_lock::ConnectionConfig{});
  redis_lock::LockManager other(std::move(locks));
  std::optional<boost::system::error_code> result;
  // NOLINTNEXTLINE(bugprone-use-after-move): that is the point
  locks.async_acquire(
      "r", {}, asio::bind_executor(io, [&](boost::system::error_code ec, redis_lock::LockGuard g) {
        EXPECT_FALSE(g);
        result = ec;
      }));
  io.run_for(5s);
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::invalid_argument);
}

TEST(Validation, BadManagerOptionsAreRejectedBeforeConnecting) {
  asio::io_context io;
  CountingListener listener(io);
  const redis_lock::ManagerOptions cases[] = {
      {.key_prefix = "app{1}:"},  // would become the hash tag: lease and counter split
      {.key_prefix = "}"},
      {.key_prefix = "lock:", .client_name = "two words"},
      {.key_prefix = "lock:", .client_name = "line\nbreak"},
      {.key_prefix = "lock:", .client_name = std::string("nul\0", 4)},
  };
  for (const auto& options : cases) {
    redis_lock::LockManager locks(io.get_executor(), listener.config(), options);
    std::optional<boost::system::error_code> result;
    locks.async_acquire("r", {},
                        [&](boost::system::error_code ec, redis_lock::LockGuard) { result = ec; });
    io.restart();
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (!result && std::chrono::steady_clock::now() < until) io.run_one_for(100ms);
    ASSERT_TRUE(result) << options.key_prefix << " / " << options.client_name;
    EXPECT_EQ(*result, error::invalid_argument)
        << options.key_prefix << " / " << options.client_name;
  }
  EXPECT_EQ(listener.accepted, 0);
}

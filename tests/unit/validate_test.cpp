// SPDX-License-Identifier: MIT
// Every rule on a configuration and on an acquire's options says which rule it is.
#include "validate.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

#include <functional>

using namespace redis_lock;
using namespace redis_lock::detail;
using namespace std::chrono_literals;

namespace {

const Shape& shape(Topology topology) { return *find_shape(topology); }

ConnectionConfig with(std::function<void(ConnectionConfig&)> change) {
  ConnectionConfig c;
  change(c);
  return c;
}

}  // namespace

TEST(Validate, EachBrokenConfigRuleIsNamed) {
  struct Case {
    ConnectionConfig config;
    const char* rule;
  };
  // clang-format off (a table: one case per line)
  const Case cases[] = {
      {with([](auto& c) { c.tls_ca_file = "ca.pem"; }), "TLS settings need tls = true (rediss://)"},
      {with([](auto& c) { c.tls_verify = false; }), "TLS settings need tls = true (rediss://)"},
      {with([](auto& c) {
         c.tls = true;
         c.unix_socket = "/s";
       }),
       "TLS is not offered over unix_socket"},
      {with([](auto& c) {
         c.tls = true;
         c.tls_cert_file = "c.pem";
       }),
       "tls_cert_file and tls_key_file go together"},
      {with([](auto& c) { c.connect_timeout = 0ms; }), "connect_timeout must be > 0"},
      {with([](auto& c) { c.command_timeout = -1ms; }), "command_timeout must be > 0"},
      {with([](auto& c) { c.host.clear(); }), "a host and a port (or a unix_socket) are needed"},
      {with([](auto& c) { c.port = 0; }), "a host and a port (or a unix_socket) are needed"},
      {with([](auto& c) { c.database = -1; }), "database must be >= 0"},
      {with([](auto& c) { c.sentinel_master = "m"; }),
       "sentinel_master, sentinel_username and sentinel_password need Topology::sentinel"},
      {with([](auto& c) {
         c.nodes = {{"a", 1}};
       }),
       "nodes need Topology::cluster, sentinel or redlock"},
      {with([](auto& c) {
         c.topology = Topology::cluster;
         c.database = 1;
       }),
       "a Cluster has database 0 only"},
      {with([](auto& c) { c.topology = Topology::sentinel; }),
       "Topology::sentinel needs a sentinel_master name of printable characters"},
      {with([](auto& c) {
         c.topology = Topology::sentinel;
         c.sentinel_master = "my master";
       }),
       "Topology::sentinel needs a sentinel_master name of printable characters"},
      {with([](auto& c) {
         c.topology = Topology::redlock;
         c.nodes = {{"a", 1}, {"b", 1}};
       }),
       "Topology::redlock needs at least 3 nodes"},
      {with([](auto& c) {
         c.topology = Topology::redlock;
         c.nodes = {{"a", 1}, {"b", 1}, {"a", 1}};
       }),
       "Redlock nodes must be distinct"},
      {with([](auto& c) {
         c.topology = Topology::cluster;
         c.unix_socket = "/s";
       }),
       "a Cluster, Sentinel or Redlock is reached over TCP, not unix_socket"},
      {with([](auto& c) {
         c.topology = Topology::cluster;
         c.nodes = {{"", 1}};
       }),
       "every node needs a host and a port"},
      {with([](auto& c) { c.topology = static_cast<Topology>(42); }), "unknown topology"},
      {with([](auto& c) {
         c.topology = static_cast<Topology>(42);
         c.sentinel_master = "m";
       }),
       "sentinel_master, sentinel_username and sentinel_password need Topology::sentinel"},
  };
  // clang-format on
  for (const auto& c : cases) {
    const auto broken = check(c.config);
    EXPECT_EQ(broken.error, error::invalid_argument) << c.rule;
    EXPECT_EQ(broken.rule, c.rule);
  }
  EXPECT_FALSE(check(ConnectionConfig{}));
}

TEST(Validate, EachBrokenOptionRuleIsNamed) {
  struct Case {
    LockOptions options;
    Topology topology;
    const char* rule;
  };
  // clang-format off (a table: one case per line)
  const Case cases[] = {
      {{.ttl = 0ms}, Topology::standalone, "LockOptions::ttl must be > 0"},
      {{.ttl = max_ttl + 1ms}, Topology::standalone, "LockOptions::ttl must be at most 10 years"},
      {{.wait = -1ms}, Topology::standalone, "LockOptions::wait must be >= 0"},
      {{.renew_every = -1ms}, Topology::standalone, "LockOptions::renew_every must be >= 0"},
      {{.max_hold = -1ms}, Topology::standalone, "LockOptions::max_hold must be >= 0"},
      {{.min_replicas = -1}, Topology::standalone, "LockOptions::min_replicas must be >= 0"},
      {{.min_replicas = 1},
       Topology::redlock,
       "LockOptions::min_replicas is not offered on Redlock"},
      {{.replication_timeout = -1ms},
       Topology::standalone,
       "LockOptions::replication_timeout must be >= 0"},
      {{.min_replicas = 1, .replication_timeout = 0ms},
       Topology::standalone,
       "LockOptions::replication_timeout must be > 0 with min_replicas"},
  };
  // clang-format on
  for (const auto& c : cases) {
    const auto broken = check("r", c.options, shape(c.topology));
    EXPECT_EQ(broken.error, error::invalid_argument) << c.rule;
    EXPECT_EQ(broken.rule, c.rule);
  }
  EXPECT_FALSE(check("r", LockOptions{}, shape(Topology::standalone)));
  EXPECT_EQ(check("", LockOptions{}, shape(Topology::standalone)).rule,
            "the resource name must not be empty");
  EXPECT_FALSE(check("r", LockOptions{.ttl = max_ttl}, shape(Topology::redlock)));
  EXPECT_EQ(check(ManagerOptions{.key_prefix = "a{b}:"}).rule,
            "key_prefix must not contain braces");
  EXPECT_EQ(check(ManagerOptions{.client_name = "a b"}).rule,
            "client_name must be printable characters without spaces");
  EXPECT_FALSE(check(ManagerOptions{.key_prefix = "app:", .client_name = "svc-1"}));
  EXPECT_EQ(check_extension(0ms).rule, "the extension's ttl must be > 0");
  EXPECT_EQ(check_extension(max_ttl + 1ms).rule, "the extension's ttl must be at most 10 years");
  EXPECT_FALSE(check_extension(1ms));
}

TEST(Validate, EachLockKindRuleIsNamed) {
  EXPECT_FALSE(static_cast<bool>(check(LockKind{}, shape(Topology::standalone))));
  EXPECT_FALSE(
      static_cast<bool>(check(LockKind{AcquireKind::permit, 3}, shape(Topology::cluster))));
  EXPECT_FALSE(
      static_cast<bool>(check(LockKind{AcquireKind::exclusive, 0}, shape(Topology::sentinel))));
  const std::pair<LockKind, std::string_view> refused[] = {
      {{AcquireKind::permit, 0}, "a semaphore's limit must be > 0"},
      {{AcquireKind::shared, 0}, "semaphores and read-write locks are not offered on Redlock"},
      {{AcquireKind::election, 0}, "an election is taken with async_campaign"},
  };
  for (const auto& [kind, rule] : refused) {
    const auto topology =
        kind.type == AcquireKind::shared ? Topology::redlock : Topology::standalone;
    const auto broken = check(kind, shape(topology));
    EXPECT_TRUE(static_cast<bool>(broken));
    EXPECT_EQ(broken.rule, rule);
    EXPECT_EQ(broken.error, error::invalid_argument);
  }
}

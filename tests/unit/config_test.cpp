// SPDX-License-Identifier: MIT
// ConnectionConfig::from_url: every accepted form and the malformed ones.
#include <redis_lock/redis_lock.hpp>

#include <gtest/gtest.h>

using redis_lock::ConnectionConfig;
using namespace std::chrono_literals;

TEST(FromUrl, HostAndDefaults) {
  auto cfg = ConnectionConfig::from_url("redis://example.com");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->host, "example.com");
  EXPECT_EQ(cfg->port, 6379);
  EXPECT_EQ(cfg->database, 0);
  EXPECT_FALSE(cfg->tls);
  EXPECT_TRUE(cfg->username.empty());
  EXPECT_TRUE(cfg->password.empty());
  EXPECT_TRUE(cfg->unix_socket.empty());
}

TEST(FromUrl, PortAndDatabase) {
  auto cfg = ConnectionConfig::from_url("redis://10.0.0.5:6380/7");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->host, "10.0.0.5");
  EXPECT_EQ(cfg->port, 6380);
  EXPECT_EQ(cfg->database, 7);
}

TEST(FromUrl, UserAndPassword) {
  auto cfg = ConnectionConfig::from_url("redis://alice:s%40cret@host:1/2");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->username, "alice");
  EXPECT_EQ(cfg->password, "s@cret");
  EXPECT_EQ(cfg->database, 2);
}

TEST(FromUrl, PasswordOnly) {
  auto cfg = ConnectionConfig::from_url("redis://:pw@host");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->username, "");
  EXPECT_EQ(cfg->password, "pw");
}

TEST(FromUrl, UserWithoutPassword) {
  auto cfg = ConnectionConfig::from_url("redis://name@host");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->username, "name");
  EXPECT_EQ(cfg->password, "");
}

TEST(FromUrl, Ipv6) {
  auto cfg = ConnectionConfig::from_url("redis://[::1]:7000");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->host, "::1");
  EXPECT_EQ(cfg->port, 7000);
  auto full = ConnectionConfig::from_url("rediss://u:p@[2001:db8::7]/3");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->host, "2001:db8::7");
  EXPECT_TRUE(full->tls);
  EXPECT_EQ(full->database, 3);
}

TEST(FromUrl, Tls) {
  auto cfg = ConnectionConfig::from_url("rediss://secure.example:6380");
  ASSERT_TRUE(cfg);
  EXPECT_TRUE(cfg->tls);
  EXPECT_EQ(cfg->port, 6380);
}

TEST(FromUrl, UnixSocket) {
  auto cfg = ConnectionConfig::from_url("unix:///var/run/redis/redis.sock?db=4");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->unix_socket, "/var/run/redis/redis.sock");
  EXPECT_EQ(cfg->database, 4);
  auto plain = ConnectionConfig::from_url("unix:///tmp/r.sock");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->unix_socket, "/tmp/r.sock");
  EXPECT_EQ(plain->database, 0);
}

TEST(FromUrl, Timeouts) {
  auto cfg = ConnectionConfig::from_url("redis://h?connect_timeout=250&command_timeout=75");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->connect_timeout, 250ms);
  EXPECT_EQ(cfg->command_timeout, 75ms);
}

TEST(FromUrl, MalformedIsInvalidArgument) {
  const char* bad[] = {
      "",
      "localhost:6379",
      "http://host",
      "redis://",
      "redis://host:0",
      "redis://host:65536",
      "redis://host:99999999999",
      "redis://host:port",
      "redis://host/abc",
      "redis://host/-1",
      "redis://host/1/2",
      "redis://host?unknown=1",
      "redis://host?db",
      "redis://host?command_timeout=0",
      "redis://host?connect_timeout=-5",
      "redis://host#frag",
      "redis://:@host",
      "redis://[::1",
      "unix://",
      "unix:///",
      "unix://host/path.sock",
      "unix:///tmp/x.sock?db=x",
      "redis://ho st",
  };
  for (const char* url : bad) {
    auto cfg = ConnectionConfig::from_url(url);
    ASSERT_FALSE(cfg) << url;
    EXPECT_EQ(cfg.error(), redis_lock::error::invalid_argument) << url;
  }
}

TEST(FromUrl, TlsParameters) {
  auto cfg = ConnectionConfig::from_url(
      "rediss://h:6380?tls_ca_file=/etc/ca%20dir/ca.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem"
      "&tls_server_name=redis.internal&tls_verify=false");
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_TRUE(cfg->tls);
  EXPECT_EQ(cfg->tls_ca_file, "/etc/ca dir/ca.pem");
  EXPECT_EQ(cfg->tls_cert_file, "/c.pem");
  EXPECT_EQ(cfg->tls_key_file, "/k.pem");
  EXPECT_EQ(cfg->tls_server_name, "redis.internal");
  EXPECT_FALSE(cfg->tls_verify);
  EXPECT_TRUE(ConnectionConfig::from_url("rediss://h")->tls_verify);  // verified by default
  EXPECT_TRUE(ConnectionConfig::from_url("rediss://h?tls_verify=true")->tls_verify);
  // TLS parameters on a plain URL are a mistake, not something to ignore.
  EXPECT_FALSE(ConnectionConfig::from_url("redis://h?tls_ca_file=/ca.pem"));
  EXPECT_FALSE(ConnectionConfig::from_url("unix:///s.sock?tls_verify=false"));
  EXPECT_FALSE(ConnectionConfig::from_url("rediss://h?tls_verify=no"));
  EXPECT_FALSE(ConnectionConfig::from_url("rediss://h?tls_verify"));
  EXPECT_FALSE(ConnectionConfig::from_url("rediss://h?tls_sni=x"));
}

TEST(FromUrl, ClusterSeeds) {
  auto cfg = ConnectionConfig::from_url("redis+cluster://u:p%40w@10.0.0.1:7000,node-b:7001,[::1]");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->topology, redis_lock::Topology::cluster);
  ASSERT_EQ(cfg->nodes.size(), 3u);
  EXPECT_EQ(cfg->nodes[0], (redis_lock::Endpoint{"10.0.0.1", 7000}));
  EXPECT_EQ(cfg->nodes[1], (redis_lock::Endpoint{"node-b", 7001}));
  EXPECT_EQ(cfg->nodes[2], (redis_lock::Endpoint{"::1", 6379}));
  EXPECT_EQ(cfg->username, "u");
  EXPECT_EQ(cfg->password, "p@w");
  EXPECT_FALSE(cfg->tls);
  auto tls = ConnectionConfig::from_url("rediss+cluster://h:1/?command_timeout=50&tls_verify=false");
  ASSERT_TRUE(tls);
  EXPECT_TRUE(tls->tls);
  EXPECT_FALSE(tls->tls_verify);
  EXPECT_EQ(tls->command_timeout, 50ms);
  ASSERT_EQ(tls->nodes.size(), 1u);
}

TEST(FromUrl, SentinelSet) {
  auto cfg = ConnectionConfig::from_url(
      "redis+sentinel://:secret@s1:26380,s2/mymaster/2?sentinel_password=sp&sentinel_username=su");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->topology, redis_lock::Topology::sentinel);
  EXPECT_EQ(cfg->sentinel_master, "mymaster");
  ASSERT_EQ(cfg->nodes.size(), 2u);
  EXPECT_EQ(cfg->nodes[0], (redis_lock::Endpoint{"s1", 26380}));
  EXPECT_EQ(cfg->nodes[1], (redis_lock::Endpoint{"s2", 26379}));  // the Sentinel default
  EXPECT_EQ(cfg->password, "secret");
  EXPECT_EQ(cfg->database, 2);
  EXPECT_EQ(cfg->sentinel_username, "su");
  EXPECT_EQ(cfg->sentinel_password, "sp");
}

TEST(FromUrl, MalformedMultiHostUrls) {
  for (const char* url : {
           "redis+cluster://",                  // no host
           "redis+cluster://h1:7000,",          // empty host in the list
           "redis+cluster://h1:7000,,h2:7001",  // empty host in the list
           "redis+cluster://h1:0",              // port 0
           "redis+cluster://h1:7000/3",         // a Cluster has database 0 only
           "redis+cluster://h1:7000/?sentinel_password=x",  // not a Sentinel URL
           "redis+sentinel://s1:26379",         // no master name
           "redis+sentinel://s1:26379/",        // empty master name
           "redis+sentinel://s1:26379/m%20x",   // percent sign in the name
           "redis+sentinel://s1:26379/m/x",     // database not a number
           "redis+sentinel://s1:26379/m?bogus=1",
           "redis+redlock://h1:1,h2:2",         // Redlock needs 3 masters or more
           "redis+redlock://h1:1,h2:2,h3:3/x",  // database not a number
       }) {
    EXPECT_FALSE(ConnectionConfig::from_url(url)) << url;
  }
}

TEST(FromUrl, RedlockMasters) {
  auto cfg = ConnectionConfig::from_url("redis+redlock://:pw@a:7001,b:7002,c/4");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->topology, redis_lock::Topology::redlock);
  ASSERT_EQ(cfg->nodes.size(), 3u);
  EXPECT_EQ(cfg->nodes[2], (redis_lock::Endpoint{"c", 6379}));
  EXPECT_EQ(cfg->password, "pw");
  EXPECT_EQ(cfg->database, 4);
}

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
  auto tls =
      ConnectionConfig::from_url("rediss+cluster://h:1/?command_timeout=50&tls_verify=false");
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
           "redis+cluster://",                              // no host
           "redis+cluster://h1:7000,",                      // empty host in the list
           "redis+cluster://h1:7000,,h2:7001",              // empty host in the list
           "redis+cluster://h1:0",                          // port 0
           "redis+cluster://h1:7000/3",                     // a Cluster has database 0 only
           "redis+cluster://h1:7000/?sentinel_password=x",  // not a Sentinel URL
           "redis+sentinel://s1:26379",                     // no master name
           "redis+sentinel://s1:26379/",                    // empty master name
           "redis+sentinel://s1:26379/m%20x",               // percent sign in the name
           "redis+sentinel://s1:26379/m/x",                 // database not a number
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

// from_url(url, why): a one-line reason naming the part of the URL that is wrong.
TEST(FromUrlWhy, NamesThePartThatIsWrong) {
  const std::string schemes =
      "redis://, rediss:// (TLS), unix://, redis+cluster://, redis+sentinel://, "
      "redis+redlock:// (rediss+... with TLS))";
  const std::string unknown_parameter =
      ": unknown name (accepted: db, connect_timeout, command_timeout; with TLS tls_ca_file, "
      "tls_cert_file, tls_key_file, tls_server_name, tls_verify; with Sentinel "
      "sentinel_username, sentinel_password)";
  const std::string escape =
      ": '%' must start a percent-escape such as %40 (write '%' itself as %25)";
  const std::string encode =
      ": a character that must be percent-encoded (a space is %20, '\"' is %22)";
  const std::string at_after_host =
      "'@' after the host: a '/', '?' or '#' in a user name or password must be "
      "percent-encoded (%2F, %3F, %23)";
  const std::string unix_form =
      "unix socket URL: no host or port; write unix:///path/to/redis.sock (three slashes)";
  const std::pair<const char*, std::string> cases[] = {
      {"", "the URL is empty"},
      // scheme
      {"localhost:6379", "no scheme (write redis://host:port; accepted: " + schemes},
      {"http://host", "scheme not supported (accepted, in lowercase: " + schemes},
      {"REDIS://host", "scheme not supported (accepted, in lowercase: " + schemes},
      {"redis:host", "missing '//' after the scheme (write redis://host:port)"},
      // host
      {"redis://", "host is missing (write redis://host:port)"},
      {"redis://:6379", "host is missing (write redis://host:port)"},
      {"redis://ho st",
       "host: a character that is not allowed in a host name (letters, digits, '-' and '.'; an "
       "IPv6 address in brackets)"},
      {"redis://[::1", "host: '[' without its ']' (an IPv6 address is written [::1])"},
      {"redis://[::zz]:1", "host: not a valid IPv6 address"},
      {"redis://[::1]x", "host: unexpected text after ']' (write [::1]:6379)"},
      {"redis://::1:6379", "host: an IPv6 address is written in brackets ([::1]:6379)"},
      {"redis://[v1.x]", "host: IPvFuture addresses ([v1.x]) are not supported"},
      {"redis://10.0.0.1;6379",
       "host: unexpected text after it (a port is written host:6379, a database host/2)"},
      // port
      {"redis://host:port", "port is not a number"},
      {"redis://host:6r5", "port is not a number"},  // Boost.URL alone reads port 6, path "r5"
      {"redis://host:", "port is empty (write host:6379, or leave out the ':')"},
      {"redis://host:0", "port is out of range 1..65535"},
      {"redis://host:65536", "port is out of range 1..65535"},
      {"redis://host:99999999999", "port is out of range 1..65535"},
      // database index
      {"redis://host/abc", "database index (the path /N after the host) is not a number"},
      {"redis://host/1/2", "database index (the path /N after the host) is not a number"},
      {"redis://host/-1", "database index is out of range 0..1048576"},
      {"redis://host/1048577", "database index is out of range 0..1048576"},
      {"redis+cluster://h1:7000/3", "database index: a Redis Cluster has database 0 only"},
      // user name and password
      {"redis://u%zz:pw@host", "user name" + escape},
      {"redis://user:pa%zz@host", "password" + escape},
      {"redis://user:pa%4@host", "password" + escape},
      {"redis://user:p@ss@host", "password: '@' must be written %40"},
      {"redis://us er:pw@host", "user name" + encode},
      {"redis://user:pa ss@host", "password" + encode},
      {"redis://user:pa/ss@host", at_after_host},
      {"redis://user:pa?ss@host", at_after_host},
      {"redis://user:pa#ss@host", at_after_host},
      {"redis://:@host",
       "user info: '@' with neither a user name nor a password (write redis://host, or "
       "redis://:password@host for a password alone)"},
      // unix socket
      {"unix://", "unix socket path is missing (write unix:///path/to/redis.sock)"},
      {"unix:///", "unix socket path is missing (write unix:///path/to/redis.sock)"},
      {"unix://host/path.sock", unix_form},
      {"unix:/tmp/x.sock", unix_form},
      {"unix:///tmp/a b.sock", "unix socket path" + encode},
      // query parameters
      {"redis://host?unknown=1", "query parameter 1" + unknown_parameter},
      {"redis://host?db=1&bogus=1", "query parameter 2" + unknown_parameter},
      {"redis://host?", "query parameter 1 is empty (a stray '?' or '&')"},
      {"redis://host?db", "query parameter db has no value (write name=value)"},
      {"redis://host?db=x", "query parameter db is not a number"},
      {"unix:///tmp/x.sock?db=-3", "query parameter db is out of range 0..1048576"},
      {"redis://host?connect_timeout=abc",
       "query parameter connect_timeout is not a number of milliseconds"},
      {"redis://host?command_timeout=0",
       "query parameter command_timeout is out of range 1..86400000 (milliseconds)"},
      {"redis://h?tls_ca_file=/ca.pem",
       "query parameter tls_ca_file needs TLS: only with rediss:// (or rediss+cluster://, ...)"},
      {"rediss://h?tls_verify=no", "query parameter tls_verify must be true or false"},
      {"redis://h?sentinel_password=x",
       "query parameter sentinel_password is only for redis+sentinel:// URLs"},
      {"redis://host?db=1&x y=2", "query" + encode},
      {"redis://host?db=1%zz", "query" + escape},
      {"redis://host#frag",
       "a fragment ('#...') is not allowed (a '#' in a password is written %23)"},
      // several servers
      {"redis+cluster://", "host is missing (write redis+cluster://host:port,host:port)"},
      {"redis+cluster://h1:7000,,h2:7001", "host 2 of the list is empty (a stray ',')"},
      {"redis+cluster://h1:1,h2:port", "host 2 of the list: port is not a number"},
      {"redis+cluster://h1:0", "host 1 of the list: port is out of range 1..65535"},
      {"redis+sentinel://s1:26379/",
       "Sentinel master name is missing (write redis+sentinel://host:26379/master-name)"},
      {"redis+sentinel://s1:26379/m%20x",
       "Sentinel master name: printable characters only, without spaces, '/', '?', '#' or '%'"},
      {"redis+sentinel://s1:26379/m/x",
       "database index (the path /N after the host) is not a number"},
      {"redis+redlock://h1:1,h2:2", "Redlock needs at least 3 masters; the URL names 2"},
  };
  for (const auto& [url, expected] : cases) {
    std::string why = "stale";
    auto cfg = ConnectionConfig::from_url(url, why);
    ASSERT_FALSE(cfg) << url;
    EXPECT_EQ(cfg.error(), redis_lock::error::invalid_argument) << url;
    EXPECT_EQ(why, expected) << url;
    EXPECT_EQ(why.find('\n'), std::string::npos) << url;
    EXPECT_FALSE(ConnectionConfig::from_url(url)) << url;  // the one-argument form agrees
  }
}

TEST(FromUrlWhy, EmptyOnSuccessAndTheSameResultAsWithoutIt) {
  for (const char* url : {"redis://example.com", "rediss://u:p@[2001:db8::7]/3",
                          "unix:///tmp/r.sock?db=4", "redis+cluster://h1:7000,h2:7001",
                          "redis+sentinel://:pw@s1,s2/mymaster/2?sentinel_password=sp",
                          "redis+redlock://a:1,b:2,c:3"}) {
    std::string why = "stale";
    auto with_why = ConnectionConfig::from_url(url, why);
    auto without = ConnectionConfig::from_url(url);
    ASSERT_TRUE(with_why) << url << ": " << why;
    ASSERT_TRUE(without) << url;
    EXPECT_EQ(why, "") << url;
    EXPECT_EQ(with_why->host, without->host);
    EXPECT_EQ(with_why->port, without->port);
    EXPECT_EQ(with_why->password, without->password);
    EXPECT_EQ(with_why->nodes, without->nodes);
  }
}

// The reason may be printed or logged: it never quotes the URL, so never its password,
// wherever a malformed URL puts it. Stronger than looking for the password in it: two
// passwords of the same shape (letters, digits, '-' in the same places) give the same reason.
TEST(FromUrlWhy, NeverContainsThePassword) {
  const std::string passwords[] = {"Pw-s3cret", "Kq-x7zbmo", "0123456789", "hunter2", "xyz"};
  const char* shapes[] = {
      "redis://user:PW@host:port",       // bad port
      "redis://user:PW@host:0",          // port out of range
      "redis://user:PW@host/db",         // bad database
      "redis://user:PW@host?unknown=1",  // unknown parameter
      "redis://user:PW@host?db=x",
      "redis://user:PW@host#frag",  // fragment
      "redis://user:PW%zz@host",    // bad escape in the password
      "redis://user:PW@x@host",     // '@' in the password
      "redis://user:PW/x@host",     // '/' in the password
      "redis://user:PW?x@host",     // '?' in the password
      "redis://user:PW#x@host",     // '#' in the password
      "redis://user:PW x@host",     // space in the password
      "redis://:PW",                // no '@': the password reads as a port
      "redis://user:PW",            // the same, with a user name
      "redis://PW:6379/x",          // a password where the host goes
      "redis://host/PW",            // ... where the database goes
      "redis://host?PW",            // ... as a query parameter
      "redis://host?PW=1",
      "PW://host",  // ... as a scheme
      "PW",
      "redis://user:PW@[::1",        // bad host
      "unix://user:PW@host/s.sock",  // unix socket with a host
      "redis+cluster://user:PW@h1:1,h2:port",
      "redis+cluster://user:PW@h1:1,,h2",
      "redis+cluster://user:PW@h1:1/2",
      "redis+sentinel://:PW@s1/m?sentinel_password=PW&bogus=1",
      "redis+sentinel://s1/m?sentinel_password=PW&db=x",
      "redis+sentinel://s1/PW%",
      "redis+redlock://user:PW@h1,h2",
      "rediss://user:PW@h?tls_verify=PW",
  };
  for (const char* shape : shapes) {
    std::string first_why;  // for the first password; the second has the same shape
    for (const auto& password : passwords) {
      std::string url = shape;
      for (auto at = url.find("PW"); at != std::string::npos; at = url.find("PW", at)) {
        url.replace(at, 2, password);
        at += password.size();
      }
      std::string why;
      ASSERT_FALSE(ConnectionConfig::from_url(url, why)) << url;
      ASSERT_FALSE(why.empty()) << url;
      EXPECT_EQ(why.find(password), std::string::npos) << url << " -> " << why;
      if (&password == &passwords[0]) first_why = why;
      if (&password == &passwords[1]) {
        EXPECT_EQ(why, first_why) << "the reason depends on the password: " << shape;
      }
    }
  }
}

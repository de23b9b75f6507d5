// SPDX-License-Identifier: MIT
// The lock server's version is checked at the first connect: a server older than 7.0 is
// refused with `server_unsupported` before any lock command is sent, and
// last_server_error() names the version found and the version needed. A real server stands
// in for the old one: the test proxy rewrites the version in its HELLO reply (Redis 6), or
// the server has HELLO renamed away (Redis 5 does not know it). (HELLO needs no ACL right:
// like AUTH, every user may send it, so an ACL cannot keep the check from running.)
#include "live.hpp"
#include "tcp_proxy.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

struct Refusal {
  error_code ec;
  std::chrono::steady_clock::duration took{};
  std::string said;  // last_server_error()
};

/// One acquire that would wait 5 s for a held lock: a server refused at connect must fail
/// it at once, not be retried until the wait runs out.
Refusal acquire_from(const ConnectionConfig& cfg, const std::string& resource) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  std::optional<error_code> got;
  const auto start = std::chrono::steady_clock::now();
  locks.async_acquire(resource, {.ttl = 5s, .wait = 5s},
                      [&](error_code ec, LockGuard) { got = ec; });
  io.run_for(10s);
  EXPECT_TRUE(got) << "the acquire did not complete";
  return {got.value_or(error::timeout), std::chrono::steady_clock::now() - start,
          locks.last_server_error()};
}

/// The lock commands the server ran (INFO commandstats), to show nothing was sent.
bool ran_lock_commands(const RedisServer& server) {
  const auto stats = server.command({"INFO", "commandstats"});
  return stats.find("cmdstat_eval") != std::string::npos ||
         stats.find("cmdstat_set:") != std::string::npos;
}

}  // namespace

TEST(ServerVersion, OlderThanSevenIsRefusedAtTheFirstConnect) {
  RedisServer server;
  TcpProxy proxy(server.port());
  proxy.rewrite_server_version("6.2.14");
  auto cfg = server.config();
  cfg.port = proxy.port();
  const auto resource = unique_resource("old");
  for (int attempt = 0; attempt < 2; ++attempt) {  // and again: each connect checks
    SCOPED_TRACE(attempt);
    const auto r = acquire_from(cfg, resource);
    EXPECT_EQ(r.ec, error::server_unsupported) << r.ec.message();
    EXPECT_LT(r.took, 2s) << "a refused server is not waited out";
    EXPECT_NE(r.said.find("6.2.14"), std::string::npos) << r.said;
    EXPECT_NE(r.said.find("7.0 or later"), std::string::npos) << r.said;
  }
  EXPECT_FALSE(ran_lock_commands(server)) << server.command({"INFO", "commandstats"});
  EXPECT_EQ(server.command({"EXISTS", lease_key(resource)}), "0");
  // The same server, not rewritten, takes the lock: the refusal was the version's.
  EXPECT_FALSE(acquire_from(server.config(), resource).ec);
}

TEST(ServerVersion, AServerWithoutHelloIsRefusedAsOlderThanSix) {
  RedisServer server({"--rename-command", "HELLO", ""});
  const auto r = acquire_from(server.config(), unique_resource("no-hello"));
  EXPECT_EQ(r.ec, error::server_unsupported) << r.ec.message();
  EXPECT_LT(r.took, 2s);
  EXPECT_NE(r.said.find("does not know HELLO, so it is older than 6.0"), std::string::npos)
      << r.said;
  EXPECT_FALSE(ran_lock_commands(server)) << server.command({"INFO", "commandstats"});
}

TEST(ServerVersion, RedlockSaysSoWhenOldMastersKeepAMajorityOutOfReach) {
  // Three masters, two of them (through proxies) saying 6.2.14: no majority can be had, and
  // the reason is the version, not an outage. With one old master of three the other two
  // are a majority: the lock is granted (an old master counts as a failed one).
  std::vector<std::unique_ptr<RedisServer>> masters;
  std::vector<std::unique_ptr<TcpProxy>> old;
  for (int i = 0; i < 3; ++i) masters.push_back(std::make_unique<RedisServer>());
  const auto redlock = [&](int old_ones) {
    old.clear();
    ConnectionConfig cfg;
    cfg.topology = Topology::redlock;
    for (int i = 0; i < 3; ++i) {
      std::uint16_t port = masters[i]->port();
      if (i < old_ones) {
        old.push_back(std::make_unique<TcpProxy>(port));
        old.back()->rewrite_server_version("6.2.14");
        port = old.back()->port();
      }
      cfg.nodes.push_back({"127.0.0.1", port});
    }
    return cfg;
  };
  const auto two_old = acquire_from(redlock(2), unique_resource("redlock-old"));
  EXPECT_EQ(two_old.ec, error::server_unsupported) << two_old.ec.message();
  EXPECT_NE(two_old.said.find("6.2.14"), std::string::npos) << two_old.said;
  const auto one_old = acquire_from(redlock(1), unique_resource("redlock-one-old"));
  EXPECT_FALSE(one_old.ec) << one_old.ec.message();
}

TEST(ServerVersion, TheServersOwnVersionIsAccepted) {
  // The server the suite runs on (Redis 7.0 or Valkey 8.0; REDIS_LOCK_EXPECT_SERVER, when
  // set, names which): HELLO says so, and a lock is taken.
  const auto hello = redis_command(shared_server_port(), {"HELLO", "2"});
  if (const char* expected = std::getenv("REDIS_LOCK_EXPECT_SERVER")) {
    EXPECT_NE(hello.find(expected), std::string::npos)
        << "the suite was to run on " << expected << ", HELLO says " << hello;
  }
  asio::io_context io;
  ConnectionConfig cfg;
  cfg.port = shared_server_port();
  LockManager locks(io.get_executor(), cfg);
  const auto r = acquire_once(locks, io, unique_resource("current"));
  EXPECT_FALSE(r.ec) << r.ec.message() << " " << locks.last_server_error();
  EXPECT_TRUE(r.owned);
}
